// Where to put the training example's one-ulp perturbation (--perturb-rank/--perturb-step) so that it is seen.
//
// One ulp added to one rank's contribution is often absorbed by rounding in the fp32 sum over the ranks: the
// AllReduce output then matches the unperturbed run and nothing downstream differs. The perturbing rank can tell
// in advance, without any communication: every rank's gradient is a pure function of the (shared) weights and of
// its shard of the (seeded) data, so it recomputes the other ranks' contributions and picks an element whose
// one-ulp change survives the sum in every order a reduction may use.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace train {

// Whether adding one ulp (std::nextafter towards +infinity) to contributions[rank] changes the fp32 sum of
// `contributions` in every order checked: each left-to-right order of the contributions (every permutation for up to
// 5 contributions; rank order and its reverse beyond), pairwise trees over rank order (neighbours first, and
// halves first, as recursive halving does), detnccl's deterministic-mode tree (split by the largest prime factor of
// the rank count), and the exactly computed sum rounded once to fp32.
bool perturbation_survives_every_order(std::span<const float> contributions, std::size_t rank);

// The element of the flat gradient to perturb on rank `rank`: the element of largest magnitude on that rank whose
// one-ulp change survives every order (perturbation_survives_every_order over the ranks' values of that element).
// local_gradients[r] is rank r's gradient before the AllReduce. nullopt when no element qualifies.
std::optional<std::size_t> visible_perturbation_element(std::span<const std::vector<float>> local_gradients,
                                                        std::size_t rank);

}  // namespace train
