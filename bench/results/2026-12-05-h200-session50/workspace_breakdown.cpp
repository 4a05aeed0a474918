// workspace_breakdown.cpp (session 50): the chunked backward's workspace regions (chunk_map.h BackwardLayout) at
// train-h64-fixed / train-h96-fixed. Build: g++ -std=c++20 -I src -I include THIS -o ws (from the repository root).
#include "cuda/generic/chunk_map.h"
#include <cstdio>
using namespace kda::cuda;
int main(){
  struct W{const char* n; long B,T,H;} ws[]={{"h64-fixed",1,8192,64},{"h96-fixed",1,8192,96}};
  for (auto w: ws){
    auto l = backward_layout(w.B,w.T,1,w.H,128,128,1);
    double M=1<<20;
    printf("%s total %.0f MiB: fwd %.0f akk %.0f tinv %.0f norms+tame %.0f starts %.0f vnew %.0f du %.0f dsend %.0f gate %.0f prod %.0f scratch %.0f\n", w.n, l.bytes/M, l.fwd.bytes/M,(l.tinv-l.akk)/M,(l.norms-l.tinv)/M,(l.starts-l.norms)/M,(l.vnew-l.starts)/M,(l.du-l.vnew)/M,(l.dsend-l.du)/M,(l.dqk-l.dsend)/M,(l.prod-l.gate)/M,(l.scratch-l.prod)/M,(l.bytes-l.scratch)/M);
  }
}
