// #line names lines after other files, real or not: nvcc's dependency file lists none of them
// (only the files the preprocessor enters), nor kernel.cu, which this source never includes.
__global__ void first(float *x) { x[0] = 1.0f; }
#line 10 "nonexistent.h"
__global__ void second(float *x) { x[1] = 2.0f; }
#line 20 "kernel.cu"
__global__ void third(float *x) { x[2] = 3.0f; }
#line 30 "line_directives.cu"
#include "scale.h"
