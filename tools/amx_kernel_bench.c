/* The AMX block32 micro-kernel alone (kernels/cpu/ukernel_amx.c), over packed panels already in
 * cache: how fast the tile loop runs, apart from packing and the frame (docs/performance.md, "The
 * AMX kernel"). Build and run from the repository root:
 *   gcc -O2 -Ikernels/cpu -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mfma -mamx-tile -mamx-bf16 \
 *       tools/amx_kernel_bench.c -o /tmp/amx_kernel_bench && /tmp/amx_kernel_bench 256 192 32
 * Arguments: the K panel depth, rows (A panels of 32), columns (B micro-panels of 32). */
#include "ukernel_amx.c"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+1e-9*t.tv_nsec; }
int main(int argc, char **argv){
  if(!available()){printf("no amx\n");return 1;}
  int64_t kc = argc>1? atoll(argv[1]) : 512, mrows = argc>2? atoll(argv[2]) : 192, ncols = argc>3 ? atoll(argv[3]) : 32;
  int64_t kp = kc/2;
  char *A = aligned_alloc(64, mrows*kp*4), *B = aligned_alloc(64, ncols*kp*4);
  memset(A, 0x3f, mrows*kp*4); memset(B, 0x3f, ncols*kp*4);
  float *acc = aligned_alloc(64, mrows*ncols*4); memset(acc,0,mrows*ncols*4);
  begin();
  int reps = 2000; double t0=now();
  for(int r=0;r<reps;r++) for(int64_t j0=0;j0<ncols;j0+=32) for(int64_t i0=0;i0<mrows;i0+=32){
    tg_tile t={.acc=acc+i0*ncols+j0,.ldacc=ncols,.load=1,.rows=32,.cols=32};
    kernel(kp, A+i0*kp*4, B+j0*kp*4, &t);
  }
  double dt=now()-t0; printf("kc=%ld rows=%ld cols=%ld: %.0f GF/s\n",(long)kc,(long)mrows,(long)ncols, reps*2.0*mrows*ncols*kc/dt/1e9);
  end(); return 0; }
