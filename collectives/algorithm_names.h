/* detnccl collectives: the one list of the deterministic algorithms and of the ways narrow floats are accumulated,
 * with their names (the values of DETNCCL_ALGO and DETNCCL_ACCUMULATE).
 *
 * RATIONALE: the algorithms are collectives/'s (one file and one registry line each, algorithm.h), so their names
 * are defined here; config/ parses DETNCCL_ALGO and DETNCCL_ACCUMULATE into these very enums. This header includes
 * only the standard library, so config/ includes it without depending on anything else of collectives/ (no link, no
 * NCCL types); nothing in collectives/ includes config/.
 *
 * Adding an algorithm: a row here (a number never used before: logs record it), its file, and its registry line.
 */
#ifndef DETNCCL_COLLECTIVES_ALGORITHM_NAMES_H
#define DETNCCL_COLLECTIVES_ALGORITHM_NAMES_H

#include <array>
#include <cstddef>
#include <cstdint>

/* X(id, number, name): the enumerator in Algorithm, its number in logs (CallFields::algorithm, docs/log-format.md:
 * never renumber or reuse one), and its DETNCCL_ALGO name. Every algorithm adds in the same association tree, so
 * they give the same bits and differ only in the messages they exchange.
 *   kAuto         chosen per call by select_algorithm()
 *   kMixedRadix   mixed-radix reduce-scatter + allgather: ring bandwidth for every n, sum(p_i - 1) messages
 *   kOneShot      every rank sends its contribution straight to the ranks that need it: one round, for small
 *                 messages */
#define DETNCCL_ALGORITHMS(X)      \
  X(kAuto, 0, "auto")              \
  X(kMixedRadix, 1, "mixed_radix") \
  X(kOneShot, 2, "one_shot")

/* X(id, name): the enumerator in Accumulate and its DETNCCL_ACCUMULATE name.
 *   kNative    each addition is done in fp32 and rounded (RNE) to the datatype: NCCL's traffic, one rounding per step
 *   kFloat32   partial sums stay fp32 across steps and are rounded once: fewer roundings, more traffic */
#define DETNCCL_ACCUMULATIONS(X) \
  X(kNative, "native")           \
  X(kFloat32, "fp32")

namespace detnccl::collectives {

/* The algorithms of the registry (DETNCCL_ALGO), from DETNCCL_ALGORITHMS. */
enum class Algorithm : std::uint8_t {
#define DETNCCL_ALGORITHM_ENUMERATOR(id, number, name) id = number,
  DETNCCL_ALGORITHMS(DETNCCL_ALGORITHM_ENUMERATOR)
#undef DETNCCL_ALGORITHM_ENUMERATOR
};

/* How narrow floats (fp16, bf16, fp8) are accumulated (DETNCCL_ACCUMULATE), from DETNCCL_ACCUMULATIONS. */
enum class Accumulate : std::uint8_t {
#define DETNCCL_ACCUMULATE_ENUMERATOR(id, name) id,
  DETNCCL_ACCUMULATIONS(DETNCCL_ACCUMULATE_ENUMERATOR)
#undef DETNCCL_ACCUMULATE_ENUMERATOR
};

/* An algorithm or accumulation mode with its name. */
struct AlgorithmName {
  Algorithm algorithm;
  const char* name;
};
struct AccumulateName {
  Accumulate accumulate;
  const char* name;
};

/* Every algorithm with its name, in table order. */
inline constexpr AlgorithmName kAlgorithmNames[] = {
#define DETNCCL_ALGORITHM_NAME(id, number, name) {Algorithm::id, name},
    DETNCCL_ALGORITHMS(DETNCCL_ALGORITHM_NAME)
#undef DETNCCL_ALGORITHM_NAME
};

/* Every accumulation mode with its name, in table order. */
inline constexpr AccumulateName kAccumulateNames[] = {
#define DETNCCL_ACCUMULATE_NAME(id, name) {Accumulate::id, name},
    DETNCCL_ACCUMULATIONS(DETNCCL_ACCUMULATE_NAME)
#undef DETNCCL_ACCUMULATE_NAME
};

}  // namespace detnccl::collectives

#endif  // DETNCCL_COLLECTIVES_ALGORITHM_NAMES_H
