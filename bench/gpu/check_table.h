// What the GPU check programs (bench/gpu/*_check.cu) share: their report, a table "check | result | figure" on
// stdout whose failed rows decide the exit status, the portable XXH3 their CPU references are computed with, and
// the random bytes they hash. Header-only, like the hash code these programs use, so that bench/gpu/CMakeLists.txt
// builds them standalone on the GPU machine (no libxxhash there).
#ifndef DETNCCL_BENCH_GPU_CHECK_TABLE_H
#define DETNCCL_BENCH_GPU_CHECK_TABLE_H

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hash/xxh3_portable.h"

namespace detnccl::gpu_check {

// Failed rows so far.
inline int g_failed_checks = 0;

// Prints the table's header line.
inline void print_table_header() { std::printf("%-62s | %-4s | %s\n", "check", "", "figure"); }

// One check's row: "ok" or "FAIL" (counted), with a figure that says what was seen.
inline void row(const std::string& check, bool ok, const std::string& figure) {
  if (!ok) ++g_failed_checks;
  std::printf("%-62s | %-4s | %s\n", check.c_str(), ok ? "ok" : "FAIL", figure.c_str());
  std::fflush(stdout);
}

// A row that reports a figure and checks nothing (device name, throughput).
inline void info(const std::string& check, const std::string& figure) {
  std::printf("%-62s | %-4s | %s\n", check.c_str(), "info", figure.c_str());
  std::fflush(stdout);
}

// Aborts the whole check on a CUDA error of the check's own calls: nothing after it would be meaningful.
inline void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::printf("%-62s | FAIL | %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

// An info row naming the current device and its number of SMs.
inline void print_device_row() {
  int ordinal = 0;
  cudaDeviceProp prop{};
  cuda_check(cudaGetDevice(&ordinal), "cudaGetDevice");
  cuda_check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  info("device", std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) + " SMs");
}

// Prints the verdict line ("PASS: 0 failed check(s)") and returns the program's exit status: 0, or 1 if a row failed.
inline int finish_table() {
  std::printf("%s: %d failed check(s)\n", g_failed_checks == 0 ? "PASS" : "FAIL", g_failed_checks);
  return g_failed_checks == 0 ? 0 : 1;
}

// XXH3_64bits_withSeed by the portable implementation: the hash64 of hash/reference_fingerprint.h.
inline std::uint64_t portable_xxh3(const std::uint8_t* p, std::uint64_t n, std::uint64_t seed) {
  return hash::xxh3::hash(p, n, seed);
}

// Fills `bytes` with the same pseudo-random bytes on every run (xorshift64; a tail shorter than 8 bytes is left as it
// is).
inline void fill_pseudo_random(std::vector<std::uint8_t>& bytes) {
  std::uint64_t state = 0x243F6A8885A308D3ULL;
  for (std::size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(&bytes[i], &state, 8);
  }
}

}  // namespace detnccl::gpu_check

#endif  // DETNCCL_BENCH_GPU_CHECK_TABLE_H
