// threads.h: how many OpenMP workers a CPU call uses (the caller's cpu_threads, else all hardware threads).
#pragma once

#include <omp.h>

namespace kda {

inline int worker_threads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

}  // namespace kda
