// detnccl command: --infer-steps and --step-boundary, the step numbering options of dump, diff, check and stats.
#ifndef DETNCCL_CLI_STEP_NUMBERING_OPTIONS_H
#define DETNCCL_CLI_STEP_NUMBERING_OPTIONS_H

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "cli/analysis/run_logs.h"
#include "cli/commands.h"
#include "steps/step_boundary.h"

namespace detnccl::cli {

// Declares --infer-steps and --step-boundary on a command.
inline void add_step_numbering_options(CLI::App& app, StepNumberingArguments& arguments) {
  app.add_flag("--infer-steps", arguments.infer_steps,
               "Number the steps of calls the job did not mark from the pattern of its calls, as the shim does "
               "(DETNCCL_STEP_INFERENCE): for logs written without steps, or by an older detnccl");
  app.add_option("--step-boundary", arguments.step_boundary,
                 "Number them at this call instead, as DETNCCL_STEP_BOUNDARY does (implies --infer-steps): " +
                     std::string(steps::kStepBoundaryAccepted));
}

// The numbering the arguments ask for; throws BadArguments (exit 2) for a boundary that does not parse.
inline analysis::StepNumbering step_numbering_of(const StepNumberingArguments& arguments) {
  analysis::StepNumbering numbering;
  numbering.infer = arguments.infer_steps || arguments.step_boundary.has_value();
  if (arguments.step_boundary) {
    if (const auto problem = steps::parse_step_boundary(*arguments.step_boundary, numbering.boundary)) {
      throw BadArguments("--step-boundary '" + arguments.step_boundary->substr(0, 80) + "' is not valid (" + *problem +
                         "); accepted: " + std::string(steps::kStepBoundaryAccepted));
    }
  }
  return numbering;
}

}  // namespace detnccl::cli

#endif  // DETNCCL_CLI_STEP_NUMBERING_OPTIONS_H
