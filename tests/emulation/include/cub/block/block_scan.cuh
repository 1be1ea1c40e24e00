// Emulated stand-in for cub::BlockScan (integer sums only), built on the emulated __syncthreads.
#pragma once

#include <vector>

namespace cub {

template <class T, int kThreads>
class BlockScan {
 public:
  struct TempStorage {
    T values[kThreads];
  };
  explicit BlockScan(TempStorage& storage) : storage_(storage) {}

  void InclusiveSum(T input, T& output) {
    T exclusive, total;
    ExclusiveSum(input, exclusive, total);
    output = exclusive + input;
  }
  void ExclusiveSum(T input, T& output, T& aggregate) {
    const int tid = threadIdx.x;
    storage_.values[tid] = input;
    __syncthreads();
    T sum = 0, total = 0;
    for (int i = 0; i < kThreads; ++i) {
      if (i < tid) sum += storage_.values[i];
      total += storage_.values[i];
    }
    __syncthreads();
    output = sum;
    aggregate = total;
  }

 private:
  TempStorage& storage_;
};

}  // namespace cub
