#include "collectives/association_tree.h"

namespace detnccl::collectives {

AssociationTree::AssociationTree(int nranks) : nranks_(nranks < 1 ? 1 : nranks) {
  int rest = nranks_;
  for (int p = 2; p * p <= rest; ++p) {
    while (rest % p == 0) {
      radices_.push_back(p);
      rest /= p;
    }
  }
  if (rest > 1) radices_.push_back(rest);  // ascending: what is left is the largest prime factor
  int place = nranks_;
  for (int radix : radices_) {
    place /= radix;
    place_values_.push_back(place);
  }
}

int AssociationTree::height() const {
  int sum = 0;
  for (int radix : radices_) sum += radix - 1;
  return sum;
}

}  // namespace detnccl::collectives
