// detnccl analysis: the magnitude of a call divergence from the runs' capture files (DETNCCL_CAPTURE=1, issue #18):
// the divergent side's buffers of both runs, and for an output divergence of a reduction every member's input of
// run A (the reordering bound). Used by `detnccl diff` on the first divergence (and with --verbose on each rank's).
#ifndef DETNCCL_CLI_ANALYSIS_DIVERGENCE_MAGNITUDE_H
#define DETNCCL_CLI_ANALYSIS_DIVERGENCE_MAGNITUDE_H

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/analysis/magnitude_report.h"
#include "cli/analysis/run_diff.h"
#include "records/capture_reader.h"

namespace detnccl::analysis {

// What diff can say about a divergence's size.
struct MagnitudeOutcome {
  bool measured = false;  // both runs captured the divergent buffer: `magnitude` holds it
  std::string side;       // "outputs" or "inputs"
  DivergenceMagnitude magnitude;
  std::string not_captured;  // !measured: why ("run B has no capture file for rank 3", ...)
  std::string no_bound;      // measured output divergence of a reduction without a verdict: why
};

// The capture files of one run, opened once each (absent files remembered as absent).
class RunCaptures {
 public:
  explicit RunCaptures(std::string run_path) : run_path_(std::move(run_path)) {}
  // The reader of `rank`'s capture file; null when the file does not exist. A file that exists but cannot be read
  // sets *error (naming the file) and returns null.
  const records::CaptureReader* reader(std::uint32_t rank, std::string* error);
  // The path of `rank`'s capture file.
  std::string path(std::uint32_t rank) const;
  const std::string& run_path() const { return run_path_; }

 private:
  std::string run_path_;
  std::map<std::uint32_t, std::unique_ptr<records::CaptureReader>> readers_;  // null: absent
};

/* Looks up a buffer whose call record says it was saved (kCallInputSaved/kCallOutputSaved): found, or damaged —
 * also when the file lacks it (cut short, another run's, or holding that fingerprint with another size: the wrong
 * size for the call), since the shim stores a buffer before the record that says so. Never kAbsent. */
records::CaptureLookup find_saved_buffer(const records::CaptureReader& reader, std::uint64_t fingerprint,
                                         std::uint64_t bytes);

/* Measures divergence `d` (an input or output divergence with both sides present; anything else: nullopt and no
 * error). A damaged capture file (or a damaged buffer in one) returns nullopt with *error naming the file. */
std::optional<MagnitudeOutcome> measure_call_divergence(RunCaptures& run_a, RunCaptures& run_b, const CallDivergence& d,
                                                        std::string* error);

}  // namespace detnccl::analysis

#endif  // DETNCCL_CLI_ANALYSIS_DIVERGENCE_MAGNITUDE_H
