// The cuBLASLt calls the backend makes, on the host: D = alpha · op(A) · op(B) + beta · C over
// column-major layouts, as the cuBLASLt documentation defines them, for bf16 or fp32 inputs with fp32
// compute and output, optionally strided-batched. Everything the library would check is checked: the
// layouts' shapes must agree with the transposes, leading dimensions must cover their rows, every
// operand must lie inside a live device allocation, attribute buffers must have the attribute's size.
// A mistake in a descriptor then fails the emulated run the way it would fail (or silently compute
// something else) on a GPU, instead of being invisible on a machine without one.
#include <cublasLt.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "tools/cuda_emu/runtime_internal.h"

namespace {

struct Layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};

Layout* L(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout*>(l); }
Desc* D(cublasLtMatmulDesc_t d) { return reinterpret_cast<Desc*>(d); }

size_t ElementBytes(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }

template <typename T>
cublasStatus_t SetValue(T* field, const void* buf, size_t bytes) {
  if (buf == nullptr || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t Invalid(const char* why) {
  std::fprintf(stderr, "CUDA emulator (cuBLASLt): %s\n", why);
  return CUBLAS_STATUS_INVALID_VALUE;
}

// The shape checks cublasLtMatmul and the heuristic make.
cublasStatus_t CheckShapes(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& out) {
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F) return Invalid("only fp32 compute and scale are emulated");
  if (a.type != b.type || (a.type != CUDA_R_16BF && a.type != CUDA_R_32F)) return Invalid("A and B must both be bf16 or fp32");
  if (c.type != CUDA_R_32F || out.type != CUDA_R_32F) return Invalid("C and D must be fp32");
  const uint64_t am = d.transa == CUBLAS_OP_N ? a.rows : a.cols, ak = d.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t bk = d.transb == CUBLAS_OP_N ? b.rows : b.cols, bn = d.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (am != out.rows || bn != out.cols || ak != bk) return Invalid("op(A) · op(B) does not have D's shape");
  if (c.rows != out.rows || c.cols != out.cols) return Invalid("C and D differ in shape");
  for (const Layout* l : {&a, &b, &c, &out}) {
    if (l->ld < static_cast<int64_t>(l->rows)) return Invalid("a leading dimension below the rows");
    if (l->batch != out.batch) return Invalid("the layouts' batch counts differ");
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Elements one batch of a layout spans, and the whole strided batch.
uint64_t Extent(const Layout& l) {
  const uint64_t one = (l.cols - 1) * static_cast<uint64_t>(l.ld) + l.rows;
  return one + static_cast<uint64_t>(l.batch - 1) * static_cast<uint64_t>(l.stride);
}

float Load(const void* base, cudaDataType t, uint64_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(base)[i];
  const uint32_t bits = uint32_t{static_cast<const uint16_t*>(base)[i]} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Element (i, j) of op(X), X column-major with leading dimension ld.
float OpElement(const void* base, const Layout& l, bool op_t, uint64_t i, uint64_t j) {
  const uint64_t xi = op_t ? j : i, xj = op_t ? i : j;
  return Load(base, l.type, xi + xj * static_cast<uint64_t>(l.ld));
}

float Dot(const float* x, const float* y, uint64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    for (int t = 0; t < 8; ++t) acc[t] += x[p + t] * y[p + t];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; p < n; ++p) s += x[p] * y[p];
  return s;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<int*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (rows == 0 || cols == 0 || ld <= 0) return Invalid("an empty matrix layout");
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete L(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return SetValue(&L(layout)->batch, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return SetValue(&L(layout)->stride, buf, bytes);
    default: return Invalid("a matrix layout attribute the emulator does not model");
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete D(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return SetValue(&D(desc)->transa, buf, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return SetValue(&D(desc)->transb, buf, bytes);
    default: return Invalid("a matmul descriptor attribute the emulator does not model");
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new uint64_t(0));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<uint64_t*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return Invalid("a preference the emulator does not model");
  return SetValue(reinterpret_cast<uint64_t*>(pref), buf, bytes);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (requested < 1) return Invalid("no heuristic results requested");
  if (cublasStatus_t s = CheckShapes(*D(desc), *L(a), *L(b), *L(c), *L(d)); s != CUBLAS_STATUS_SUCCESS) return s;
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* a_ptr,
                              cublasLtMatrixLayout_t a_desc, const void* b_ptr, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* c_ptr, cublasLtMatrixLayout_t c_desc, void* d_ptr,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  const Desc d = *D(desc);
  const Layout a = *L(a_desc), b = *L(b_desc), c = *L(c_desc), out = *L(d_desc);
  if (cublasStatus_t s = CheckShapes(d, a, b, c, out); s != CUBLAS_STATUS_SUCCESS) return s;
  if (algo == nullptr) return Invalid("no algorithm");
  if (workspace_bytes > 0 && !lpemu::InsideDeviceAllocation(workspace, workspace_bytes)) {
    return Invalid("the workspace is not device memory");
  }
  const struct {
    const void* p;
    const Layout* l;
  } operands[4] = {{a_ptr, &a}, {b_ptr, &b}, {c_ptr, &c}, {d_ptr, &out}};
  for (const auto& o : operands) {
    if (!lpemu::InsideDeviceAllocation(o.p, Extent(*o.l) * ElementBytes(o.l->type))) {
      return Invalid("an operand reaches outside its device allocation");
    }
  }
  // Host scalars are read when the call is made (a captured matmul keeps these values).
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
  lpemu::Enqueue(lpemu::StreamOf(stream), [=] {
    const uint64_t m = out.rows, n = out.cols, k = ta ? a.rows : a.cols;
    const size_t ea = ElementBytes(a.type);
    for (int32_t batch = 0; batch < out.batch; ++batch) {
      const auto* ab = static_cast<const unsigned char*>(a_ptr) + batch * a.stride * ea;
      const auto* bb = static_cast<const unsigned char*>(b_ptr) + batch * b.stride * ea;
      const float* cb = static_cast<const float*>(c_ptr) + batch * c.stride;
      float* db = static_cast<float*>(d_ptr) + batch * out.stride;
      // Every column of op(B) (the activations: few) as k contiguous floats; the rows of op(A) (the
      // weights: up to the vocabulary's 262,144) one at a time, so nothing of the weights' size is made.
      std::vector<float> bcols(n * k), arow(k);
      for (uint64_t j = 0; j < n; ++j) {
        for (uint64_t p = 0; p < k; ++p) bcols[j * k + p] = OpElement(bb, b, tb, p, j);
      }
      for (uint64_t i = 0; i < m; ++i) {
        for (uint64_t p = 0; p < k; ++p) arow[p] = OpElement(ab, a, ta, i, p);
        for (uint64_t j = 0; j < n; ++j) {
          const float prod = al * Dot(arow.data(), &bcols[j * k], k);
          const float prior = be == 0.0f ? 0.0f : be * cb[i + j * c.ld];  // beta = 0: C is not read
          db[i + j * out.ld] = prod + prior;
        }
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
