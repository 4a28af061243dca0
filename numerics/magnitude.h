/* detnccl numerics: how much two buffers of one NCCL datatype differ, not only whether (issue #18).
 *
 * Whether an element differs is decided bitwise: -0 against +0, and two NaNs with different payloads, count as
 * differing elements (a fingerprint sees them), even though their distance below is 0.
 *
 * ULP distance of two elements: the number of representable values one must step over to go from one to the other,
 * i.e. the difference of their places in the monotone integer order of the format's bit patterns (sign and
 * magnitude: +x is at `magnitude bits`, -x at `-(magnitude bits)`). Adjacent values are 1 apart, across zero and
 * the subnormals too; -0 and +0 are 0 apart (the same value); the largest finite value and infinity are 1 apart
 * (infinity is the next pattern). A NaN against a number is kInfiniteUlp (no finite count) and counted in
 * `nan_mismatches`; two NaNs are 0 apart (counted in `nan_payload_differences` when their bits differ).
 * Integers: the absolute difference of the two values (exact, up to 2^64 - 1).
 *
 * Errors are measured from the reference side (the first buffer, e.g. run A): abs = |other - reference|,
 * rel = abs / |reference|. A reference of 0 gives rel = 0 when the other side is 0 too (+0 against -0) and +inf
 * otherwise. Any infinity or NaN in a differing element makes its abs and rel errors +inf (their ULP distance stays
 * the order count above, infinite only for NaN against a number).
 */
#ifndef DETNCCL_NUMERICS_MAGNITUDE_H
#define DETNCCL_NUMERICS_MAGNITUDE_H

#include <cstddef>
#include <cstdint>
#include <limits>

#include "abi/nccl_abi.h"

namespace detnccl::numerics {

/* The ULP distance of a NaN against a number. */
inline constexpr std::uint64_t kInfiniteUlp = std::numeric_limits<std::uint64_t>::max();

/* The difference of two buffers of `elements_compared` elements. Indices are element indices; -1: none. */
struct Magnitude {
  std::uint64_t elements_compared = 0;
  std::uint64_t elements_differing = 0;       // bitwise
  std::int64_t first_index = -1;              // the first differing element
  std::int64_t worst_index = -1;              // the differing element of the largest ULP distance (ties: the first)
  std::uint64_t max_ulp = 0;                  // its ULP distance (kInfiniteUlp: a NaN against a number)
  double max_abs_error = 0;                   // the largest abs error over the differing elements (+inf: see above)
  double max_rel_error = 0;                   // the largest rel error over the differing elements (+inf: see above)
  std::uint64_t nan_mismatches = 0;           // elements where exactly one side is NaN
  std::uint64_t nan_payload_differences = 0;  // elements where both sides are NaN with different bits
  std::uint64_t signed_zero_differences = 0;  // elements +0 on one side and -0 on the other
  std::uint64_t infinity_differences = 0;     // differing elements with an infinity on either side (no NaN)

  bool identical() const { return elements_differing == 0; }
};

/* The ULP distance between the elements of `type` with raw bits `a` and `b` (see the header comment). 0 for an
 * invalid type. */
std::uint64_t ulp_distance(ncclDataType_t type, std::uint64_t a, std::uint64_t b);

/* Compares `count` elements of `type` of `reference` and `other` (byte buffers, no alignment needed). An invalid
 * type compares nothing (elements_compared 0). */
Magnitude compare_buffers(ncclDataType_t type, const void* reference, const void* other, std::size_t count);

}  // namespace detnccl::numerics

#endif  // DETNCCL_NUMERICS_MAGNITUDE_H
