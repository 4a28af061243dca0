// detnccl command: the page of `detnccl report` (cli/report/report.html), embedded in the program at build time
// (cmake/EmbedText.cmake generates report_template.cc): no file is looked up when the command runs.
#ifndef DETNCCL_CLI_REPORT_REPORT_TEMPLATE_H
#define DETNCCL_CLI_REPORT_REPORT_TEMPLATE_H

#include <string_view>

namespace detnccl::cli {

// Where the page's data goes: the template holds it once, as the text of its <script type="application/json">.
inline constexpr std::string_view kReportDataMarker = "/*DETNCCL_REPORT_DATA*/";

// The text of cli/report/report.html.
std::string_view report_template();

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_REPORT_REPORT_TEMPLATE_H
