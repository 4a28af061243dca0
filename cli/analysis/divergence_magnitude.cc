#include "cli/analysis/divergence_magnitude.h"

#include <sys/stat.h>

#include <cstring>

#include "abi/traced_ops.h"
#include "cli/analysis/call_layout.h"
#include "cli/analysis/call_members.h"
#include "records/capture_format.h"

namespace detnccl::analysis {
namespace {

bool file_exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

// What looking one buffer up gave: bytes, or not captured (note), or damaged (error).
struct Buffer {
  std::vector<std::byte> bytes;
  bool found = false;
  std::string note;
};

bool look_up(RunCaptures& run, const char* name, std::uint32_t rank, std::uint64_t fingerprint, std::uint64_t bytes,
             std::uint16_t flags, std::uint16_t saved_flag, Buffer* out, std::string* error) {
  const records::CaptureReader* reader = run.reader(rank, error);
  if (!error->empty()) return false;
  if (reader == nullptr) {
    out->note = std::string("run ") + name + " has no capture file for rank " + std::to_string(rank) +
                "; DETNCCL_CAPTURE=1 saves the buffers";
    return true;
  }
  if ((flags & saved_flag) == 0) {
    out->note = std::string("run ") + name + " did not capture this buffer of rank " + std::to_string(rank) +
                ((flags & records::kCallSaveSkipped) != 0
                     ? ": its record says capture was skipped (the budget DETNCCL_CAPTURE_BYTES was spent, the buffer "
                       "was too large for a record, or capture failed)"
                     : ": its record says it was not saved (outside the fingerprint windows, or capture was off)");
    return true;
  }
  records::CaptureLookup lookup = find_saved_buffer(*reader, fingerprint, bytes);
  if (lookup.status != records::CaptureLookupStatus::kFound) {
    *error = run.path(rank) + ": " + lookup.message;
    return false;
  }
  out->bytes = std::move(lookup.bytes);
  out->found = true;
  return true;
}

}  // namespace

records::CaptureLookup find_saved_buffer(const records::CaptureReader& reader, std::uint64_t fingerprint,
                                         std::uint64_t bytes) {
  records::CaptureLookup lookup = reader.find(fingerprint, bytes);
  if (lookup.status == records::CaptureLookupStatus::kAbsent) {
    // RATIONALE: the shim stores a buffer before it writes the record that says so, so a file without a buffer its
    // log says it holds was cut short, replaced or forged: damaged, not "not captured".
    lookup.status = records::CaptureLookupStatus::kDamaged;
    lookup.message +=
        ", though the log's call record says it was saved there (a truncated capture file, one of "
        "another run, or a blob of the wrong size for the call)";
  }
  return lookup;
}

std::string RunCaptures::path(std::uint32_t rank) const { return run_path_ + "/" + records::capture_file_name(rank); }

const records::CaptureReader* RunCaptures::reader(std::uint32_t rank, std::string* error) {
  if (auto it = readers_.find(rank); it != readers_.end()) return it->second.get();
  const std::string file = path(rank);
  std::unique_ptr<records::CaptureReader>& slot = readers_[rank];
  if (!file_exists(file)) return nullptr;
  records::OpenedCapture opened = records::CaptureReader::open_file(file);
  if (opened.reader == nullptr) {
    *error = file + ": " + opened.error;
    return nullptr;
  }
  if (opened.reader->end().kind == records::CaptureEndKind::kCorrupt) {
    // A record of the file is damaged: what it held cannot be trusted to be absent.
    *error = file + ": " + opened.reader->end().message;
    return nullptr;
  }
  slot = std::move(opened.reader);
  return slot.get();
}

std::optional<MagnitudeOutcome> measure_call_divergence(RunCaptures& run_a, RunCaptures& run_b, const CallDivergence& d,
                                                        std::string* error) {
  error->clear();
  if ((d.kind != DivergenceKind::kInput && d.kind != DivergenceKind::kOutput) || !d.a.present || !d.b.present) {
    return std::nullopt;
  }
  // The buffer that differs: the input when it does (an input divergence's origin), else the output (an output
  // divergence, or a receiver whose own input matches while what it received differs: an AllGather, a Recv).
  const bool output = d.kind == DivergenceKind::kOutput || (!d.input_differs && d.output_differs);
  const records::CallFields& fa = d.a.fields;
  const records::CallFields& fb = d.b.fields;
  const std::uint64_t element = datatype_bytes(fa.datatype);
  if (element == 0) return std::nullopt;
  const auto side_bytes = [&](const CallSide& side) {
    const std::uint64_t elements = output
                                       ? output_elements(side.fields, side.communicator.nranks, side.communicator.rank)
                                       : input_elements(side.fields, side.communicator.nranks, side.communicator.rank);
    return saturating_product(elements, element);  // a forged count must not wrap to a small blob's size
  };
  const std::uint64_t bytes_a = side_bytes(d.a), bytes_b = side_bytes(d.b);
  const std::uint16_t flag = output ? records::kCallOutputSaved : records::kCallInputSaved;
  MagnitudeOutcome outcome;
  outcome.side = output ? "outputs" : "inputs";
  Buffer a, b;
  if (!look_up(run_a, "A", d.rank, output ? fa.output_fingerprint : fa.input_fingerprint, bytes_a, fa.flags, flag, &a,
               error) ||
      !look_up(run_b, "B", d.rank, output ? fb.output_fingerprint : fb.input_fingerprint, bytes_b, fb.flags, flag, &b,
               error)) {
    return std::nullopt;
  }
  if (!a.found || !b.found) {
    outcome.not_captured = !a.found ? a.note : b.note;
    return outcome;
  }
  if (a.bytes.size() != b.bytes.size()) {
    outcome.not_captured = "the captured buffers have different sizes";
    return outcome;
  }
  const std::size_t count = a.bytes.size() / element;
  numerics::ReductionOp op;
  op.redop = fa.redop;
  op.premulsum_scalar_bits = fa.premulsum_scalar;
  const abi::TracedOpRow* row = abi::traced_op_row(static_cast<std::uint16_t>(fa.op));
  const bool reduction = row != nullptr && row->reduces && fa.redop >= 0;
  if (!output || !reduction) {
    outcome.magnitude =
        measure_divergence(static_cast<ncclDataType_t>(fa.datatype), a.bytes.data(), b.bytes.data(), count, op);
    outcome.measured = true;
    return outcome;
  }
  // The reordering bound: every member's input of this call in run A.
  std::vector<std::vector<std::byte>> inputs;
  std::string members_error;
  std::optional<std::vector<MemberCall>> members =
      d.a.communicator.known ? find_member_calls(run_a.run_path(), d.a.communicator.id, d.a.communicator.nranks,
                                                 d.a.collective_index, &members_error)
                             : std::nullopt;
  if (!d.a.communicator.known) members_error = "the call's communicator is not recorded";
  if (members) {
    // The bound is for equal inputs: an output that differs because a member's input does (a receiver of another
    // rank's difference) has no verdict.
    std::string b_error;
    const std::optional<std::vector<MemberCall>> members_b =
        d.b.communicator.known ? find_member_calls(run_b.run_path(), d.b.communicator.id, d.b.communicator.nranks,
                                                   d.b.collective_index, &b_error)
                               : std::nullopt;
    if (!members_b || members_b->size() != members->size()) {
      members_error = "run B's members of the call: " +
                      (d.b.communicator.known ? b_error : std::string("the call's communicator is not recorded"));
      members.reset();
    } else {
      for (std::size_t i = 0; i < members->size(); ++i) {
        const records::CallFields& ma = (*members)[i].fields;
        const records::CallFields& mb = (*members_b)[i].fields;
        if (ma.input_fingerprint != mb.input_fingerprint ||
            ((ma.flags ^ mb.flags) & records::kCallInputFingerprint) != 0) {
          members_error = "rank " + std::to_string((*members)[i].global_rank) +
                          "'s input differs between the runs, and the bound is for equal inputs";
          members.reset();
          break;
        }
      }
    }
  }
  if (members) {
    for (const MemberCall& member : *members) {
      Buffer input;
      const std::uint64_t input_bytes =
          saturating_product(input_elements(member.fields, d.a.communicator.nranks, member.comm_rank), element);
      if (!look_up(run_a, "A", member.global_rank, member.fields.input_fingerprint, input_bytes, member.fields.flags,
                   records::kCallInputSaved, &input, error)) {
        return std::nullopt;
      }
      if (!input.found) {
        members_error = input.note;
        break;
      }
      inputs.push_back(std::move(input.bytes));
    }
  }
  std::vector<const void*> addends;
  if (members && inputs.size() == members->size()) {
    // A ReduceScatter's output on communicator rank k reduces block k of every input.
    const bool scatter = fa.op == records::OpId::kReduceScatter;
    const std::size_t offset = scatter ? static_cast<std::size_t>(d.a.communicator.rank) * count * element : 0;
    for (const auto& input : inputs) {
      if (input.size() < offset + count * element) {
        members_error = "a member's captured input is shorter than the call";
        break;
      }
      addends.push_back(input.data() + offset);
    }
  }
  const bool bounded = members && addends.size() == members->size() && !addends.empty();
  outcome.magnitude = measure_divergence(static_cast<ncclDataType_t>(fa.datatype), a.bytes.data(), b.bytes.data(),
                                         count, op, bounded ? &addends : nullptr);
  if (!bounded) outcome.no_bound = members_error;
  outcome.measured = true;
  return outcome;
}

}  // namespace detnccl::analysis
