// SPDX-License-Identifier: Apache-2.0
// The one percentile of the benchmarks, so that their p50/p99 figures are
// comparable with each other (sdk/python/bench/api_bench.py computes the
// same).
#pragma once

#include <vector>

namespace dsec::bench {

// Nearest rank: the smallest sample such that at least p% of the samples
// are <= it, i.e. sorted[ceil(p / 100 * n) - 1] (sorted[0] for p = 0), with
// p in [0, 100]. Always one of the samples, never an interpolation. 0 for
// no samples.
double Percentile(std::vector<double> values, double p);

}  // namespace dsec::bench
