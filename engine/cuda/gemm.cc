#include "engine/cuda/gemm.h"

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"

namespace layerpipe::cuda {
namespace {

// Enough for the split-K and stream-K algorithms the heuristic picks for these shapes.
constexpr size_t kWorkspaceBytes = size_t{64} << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create() {
  std::unique_ptr<Gemm> g(new Gemm());
  LP_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&g->handle_));
  LP_RETURN_IF_ERROR(g->workspace_.Allocate(kWorkspaceBytes));
  return g;
}

Gemm::~Gemm() {
  for (auto& [key, plan] : plans_) Destroy(plan);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

void Gemm::Destroy(Plan& p) {
  if (p.a != nullptr) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b != nullptr) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c != nullptr) cublasLtMatrixLayoutDestroy(p.c);
  if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

absl::StatusOr<const Gemm::Plan*> Gemm::PlanFor(int64_t m, int64_t n, int64_t k, bool bf16, bool w_is_kn,
                                                int batch) {
  const Key key{m, n, k, bf16, w_is_kn, batch};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  Plan p;
  // Column-major view: C (n x m, ld n) = op(A) · B with A = W seen as k x n (ld k) transposed (or, for
  // W [k, n], as n x k with ld n, not transposed), and B = x seen as k x m (ld k). C is then y in
  // row-major [m, n].
  const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  auto fail = [&p](absl::Status st) {
    Destroy(p);
    return st;
  };
  if (auto st = CublasStatus(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
      !st.ok())
    return fail(st);
  const cublasOperation_t transa = w_is_kn ? CUBLAS_OP_N : CUBLAS_OP_T, transb = CUBLAS_OP_N;
  if (auto st = CublasStatus(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)), "transa");
      !st.ok())
    return fail(st);
  if (auto st = CublasStatus(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)), "transb");
      !st.ok())
    return fail(st);
  if (auto st = CublasStatus(w_is_kn ? cublasLtMatrixLayoutCreate(&p.a, in, n, k, n)
                                     : cublasLtMatrixLayoutCreate(&p.a, in, k, n, k),
                             "layout A");
      !st.ok())
    return fail(st);
  if (auto st = CublasStatus(cublasLtMatrixLayoutCreate(&p.b, in, k, m, k), "layout B"); !st.ok()) return fail(st);
  if (auto st = CublasStatus(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, n, m, n), "layout C"); !st.ok())
    return fail(st);

  if (batch > 1) {
    const int32_t count = batch;
    const int64_t strides[3] = {n * k, k * m, n * m};
    cublasLtMatrixLayout_t layouts[3] = {p.a, p.b, p.c};
    for (int i = 0; i < 3; ++i) {
      if (auto st = CublasStatus(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                                  &count, sizeof(count)),
                                 "batch count");
          !st.ok())
        return fail(st);
      if (auto st = CublasStatus(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                  &strides[i], sizeof(strides[i])),
                                 "batch stride");
          !st.ok())
        return fail(st);
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  if (auto st = CublasStatus(cublasLtMatmulPreferenceCreate(&pref), "preference"); !st.ok()) return fail(st);
  const uint64_t ws = workspace_.bytes();
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (auto st = CublasStatus(hs, "matmul heuristic"); !st.ok()) return fail(st);
  if (found == 0) {
    return fail(absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for ", m, "x", k, " · (", n, "x", k,
                                                 ")ᵀ in ", bf16 ? "bf16" : "fp32")));
  }
  p.algo = result.algo;
  return &plans_.emplace(key, p).first->second;
}

absl::Status Gemm::Run(const void* x, const void* w, bool bf16, int64_t m, int64_t n, int64_t k, float* y,
                       cudaStream_t stream, const GemmOptions& options) {
  if (m <= 0 || n <= 0 || options.batch <= 0) return absl::OkStatus();
  absl::StatusOr<const Plan*> plan = PlanFor(m, n, k, bf16, options.w_is_kn, options.batch);
  if (!plan.ok()) return plan.status();
  const float alpha = 1.0f, beta = options.accumulate ? 1.0f : 0.0f;
  LP_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, (*plan)->desc, &alpha, w, (*plan)->a, x, (*plan)->b, &beta, y,
                                           (*plan)->c, y, (*plan)->c, &(*plan)->algo, workspace_.get(),
                                           workspace_.bytes(), stream));
  return absl::OkStatus();
}

}  // namespace layerpipe::cuda
