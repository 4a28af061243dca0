// bench_steps: what numbering steps from the call pattern (steps/step_inference.h) costs per call, apart from the
// rest of the shim: the engine fed a data-parallel job's calls (three buckets, a ring, a logging extra every third
// iteration) under a mutex, as interpose/tracer.cc's stamp_step feeds it, against the same loop computing only the
// call's signature (the baseline, measured in the same run). bench_shim measures the whole traced call.
//   bench_steps [--calls N]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

#include "steps/step_inference.h"

namespace {

using detnccl::records::CallFields;
using detnccl::records::OpId;

std::vector<CallFields> one_iteration(bool with_logging) {
  std::vector<CallFields> calls;
  const auto add = [&](OpId op, std::uint64_t count, std::int32_t peer) {
    CallFields call;
    call.op = op;
    call.count = count;
    call.datatype = 7;
    call.redop = op == OpId::kAllReduce ? 0 : -1;
    call.peer = peer;
    calls.push_back(call);
  };
  add(OpId::kAllReduce, 4096, -1);
  add(OpId::kAllReduce, 1024, -1);
  add(OpId::kAllReduce, 300, -1);
  add(OpId::kSend, 64, 1);
  add(OpId::kRecv, 64, 3);
  if (with_logging) add(OpId::kAllReduce, 1, -1);
  return calls;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t total = 20'000'000;
  CLI::App app{"Cost per call of numbering steps from the call pattern"};
  app.add_option("--calls", total, "Calls fed to the engine")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const std::vector<CallFields> plain = one_iteration(false);
  const std::vector<CallFields> logged = one_iteration(true);
  const auto run = [&](auto per_call) {
    std::uint64_t fed = 0;
    std::uint64_t sink = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t iteration = 0; fed < total; ++iteration) {
      for (const CallFields& call : iteration % 3 == 0 ? logged : plain) {
        sink += per_call(call);
        ++fed;
      }
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    return std::pair{ns / static_cast<double>(fed), sink};
  };
  const auto [baseline, signatures] =
      run([](const CallFields& call) { return detnccl::steps::call_signature(call, 0, 4); });
  std::mutex mutex;
  detnccl::steps::StepInference inference;
  const auto [numbered, steps] = run([&](const CallFields& call) {
    std::lock_guard lock(mutex);
    return inference.next(call, 0, 4);
  });
  std::printf("call signature alone: %.1f ns per call (checksum %llu)\n", baseline,
              static_cast<unsigned long long>(signatures % 1000));
  std::printf("numbering under a mutex: %.1f ns per call, %.1f ns more; %llu steps numbered over %llu calls\n",
              numbered, numbered - baseline, static_cast<unsigned long long>(inference.next(logged[0], 0, 4)),
              static_cast<unsigned long long>(total));
  return steps == 0 ? 1 : 0;
}
