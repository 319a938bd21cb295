// The CUDA emulator's own tests: that kernels see CUDA's semantics (shuffles, barriers, shared memory,
// launch limits), that streams, events and graphs order work as the runtime documents, that cuBLASLt
// computes what its documentation defines, and that the misuse a GPU punishes is caught here too.
// translate_cu.py turns this file into host C++, as it does the backend's kernels.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

template <typename T>
struct DeviceArray {
  explicit DeviceArray(size_t n) : n(n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess); }
  ~DeviceArray() { cudaFree(p); }
  std::vector<T> Get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void Set(const std::vector<T>& h) {
    ASSERT_EQ(h.size(), n);
    ASSERT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  T* p = nullptr;
  size_t n;
};

__global__ void ShuffleKernel(int* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int v = warp * 1000 + lane * 10;
  int* o = out + threadIdx.x * 4;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 5);
  o[1] = __shfl_down_sync(0xffffffffu, v, 3);
  o[2] = __shfl_up_sync(0xffffffffu, v, 2);
  o[3] = __shfl_sync(0xffffffffu, v, 7);
}

TEST(CudaEmulator, WarpShufflesReadTheLanesCudaDefines) {
  DeviceArray<int> out(64 * 4);
  ShuffleKernel<<<1, 64>>>(out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> got = out.Get();
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, base = (t / 32) * 1000;
    EXPECT_EQ(got[t * 4 + 0], base + (lane ^ 5) * 10) << t;
    EXPECT_EQ(got[t * 4 + 1], base + (lane + 3 < 32 ? lane + 3 : lane) * 10) << t;
    EXPECT_EQ(got[t * 4 + 2], base + (lane >= 2 ? lane - 2 : lane) * 10) << t;
    EXPECT_EQ(got[t * 4 + 3], base + 7 * 10) << t;
  }
}

// A tree sum in shared memory: each block its own copy, barriers between the levels.
__global__ void TreeSumKernel(const float* x, float* out) {
  __shared__ float partial[256];
  partial[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

TEST(CudaEmulator, SharedMemoryAndBarriersAreBlockWide) {
  constexpr int kBlocks = 5, kThreads = 256;
  std::vector<float> x(kBlocks * kThreads);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17);
  DeviceArray<float> dx(x.size()), out(kBlocks);
  dx.Set(x);
  TreeSumKernel<<<kBlocks, kThreads>>>(dx.p, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = out.Get();
  for (int b = 0; b < kBlocks; ++b) {
    float want = 0;
    for (int t = 0; t < kThreads; ++t) want += x[b * kThreads + t];
    EXPECT_EQ(got[b], want) << b;
  }
}

// Reads a neighbour's shared-memory write with no barrier in between: a race.
__global__ void MissingBarrierKernel(int tag, int* out) {
  __shared__ int v[64];
  v[threadIdx.x] = tag;
  out[threadIdx.x] = v[(threadIdx.x + 1) % 64];
}

TEST(CudaEmulator, AReadWithoutABarrierSeesAStaleValue) {
  DeviceArray<int> out(64);
  // Threads run ascending or descending between barriers: either way some thread reads its
  // neighbour's slot before the neighbour has written this launch's tag.
  for (int tag = 1; tag <= 2; ++tag) {
    MissingBarrierKernel<<<1, 64>>>(tag, out.p);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    int stale = 0;
    for (int v : out.Get()) stale += v != tag;
    EXPECT_GT(stale, 0) << "launch " << tag;
  }
}

__global__ void DynamicSharedKernel(int n, int* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  int* s = reinterpret_cast<int*>(smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = i * 3;
  __syncthreads();
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int i = 0; i < n; ++i) sum += s[i];
    out[blockIdx.x] = sum;
  }
}

TEST(CudaEmulator, DynamicSharedMemoryBeyondTheDefaultNeedsTheAttribute) {
  DeviceArray<int> out(2);
  const int small = 1024, big = 20000;  // 4 KiB, then 80 KB
  DynamicSharedKernel<<<2, 128, small * sizeof(int)>>>(small, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.Get()[1], 3 * small * (small - 1) / 2);

  DynamicSharedKernel<<<2, 128, big * sizeof(int)>>>(big, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(DynamicSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(big * sizeof(int))),
            cudaSuccess);
  DynamicSharedKernel<<<2, 128, big * sizeof(int)>>>(big, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.Get()[0], 3 * (big * (big - 1) / 2));
  EXPECT_EQ(cudaFuncSetAttribute(DynamicSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10),
            cudaErrorInvalidValue);
}

__global__ void NothingKernel() {}

TEST(CudaEmulator, LaunchesOutsideTheDeviceLimitsFail) {
  NothingKernel<<<1, 2048>>>();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  NothingKernel<<<dim3(1, 70000), 32>>>();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  NothingKernel<<<0, 32>>>();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  NothingKernel<<<1, 32>>>();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

__global__ void DivergentBarrierKernel() {
  if (threadIdx.x % 2 == 1) return;
  __syncthreads();
}

__global__ void HalfWarpShuffleKernel(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void PartialMaskKernel(int* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffu, 1, 1); }

TEST(CudaEmulatorDeathTest, BarriersAndWarpOperationsInDivergentCodeStopTheRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto run = [](auto launch) {
    launch();
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(run([] { DivergentBarrierKernel<<<1, 64>>>(); }), "DivergentBarrierKernel.*divergent code");
  EXPECT_DEATH(run([] {
                 int* out = nullptr;
                 cudaMalloc(&out, 32 * sizeof(int));
                 HalfWarpShuffleKernel<<<1, 32>>>(out);
               }),
               "HalfWarpShuffleKernel.*not every lane of warp 0.*WWWWWWWWWWWWWWWWDDDDDDDDDDDDDDDD");
  EXPECT_DEATH(run([] {
                 int* out = nullptr;
                 cudaMalloc(&out, 32 * sizeof(int));
                 PartialMaskKernel<<<1, 32>>>(out);
               }),
               "partial lane mask");
}

__global__ void OverrunKernel(float* x, int n) {
  if (threadIdx.x == 0) x[n] = 1.0f;  // one past the end
}

TEST(CudaEmulatorDeathTest, AKernelWritingPastAnAllocationStopsTheRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* x = nullptr;
        cudaMalloc(&x, 1024 * sizeof(float));
        OverrunKernel<<<1, 32>>>(x, 1024);
        cudaDeviceSynchronize();
      },
      "invalid memory access at .* in kernel OverrunKernel");
}

__global__ void MisalignedVectorKernel(const float* x, float* out) {
  const uint4 v = *reinterpret_cast<const uint4*>(x + 1);  // 4 bytes past a 16-byte boundary
  out[threadIdx.x] = __uint_as_float(v.x);
}

TEST(CudaEmulatorDeathTest, AMisalignedVectorAccessStopsTheRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* x = nullptr;
        cudaMalloc(&x, 64 * sizeof(float));
        MisalignedVectorKernel<<<1, 32>>>(x, x + 32);
        cudaDeviceSynchronize();
      },
      "MisalignedVectorKernel.*misaligned address");
}

__global__ void AddKernel(int* x, int n, int v) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] += v;
}

__global__ void CopyKernel(const int* src, int* dst, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}

TEST(CudaEmulator, AnEventOrdersWorkAcrossStreams) {
  constexpr int n = 1 << 16;
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t done;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  DeviceArray<int> x(n), y(n);
  x.Set(std::vector<int>(n, 0));
  for (int round = 1; round <= 3; ++round) {
    for (int k = 0; k < 10; ++k) AddKernel<<<8, 256, 0, a>>>(x.p, n, 1);
    ASSERT_EQ(cudaEventRecord(done, a), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(b, done, 0), cudaSuccess);
    CopyKernel<<<8, 256, 0, b>>>(x.p, y.p, n);
    ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
    for (int v : y.Get()) ASSERT_EQ(v, 10 * round);
  }
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(done), cudaSuccess);
}

TEST(CudaEmulator, PinnedCopiesAreAsynchronousAndPageableOnesAreNot) {
  constexpr int n = 1 << 12;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  DeviceArray<int> x(n);
  std::vector<int> pageable(n, 7);
  ASSERT_EQ(cudaMemcpyAsync(x.p, pageable.data(), n * sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  pageable.assign(n, 8);  // staged at the call: the copy still carries 7s
  std::vector<int> back(n, 0);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), x.p, n * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(back, std::vector<int>(n, 7));  // a pageable destination is written when the call returns

  int* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n * sizeof(int)), cudaSuccess);
  for (int i = 0; i < n; ++i) pinned[i] = i;
  ASSERT_EQ(cudaMemcpyAsync(x.p, pinned, n * sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, x.p, n * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (int i = 0; i < n; ++i) ASSERT_EQ(pinned[i], i);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(CudaEmulator, CopiesOutsideTheirAllocationsAreRefused) {
  DeviceArray<float> x(100);
  std::vector<float> h(200);
  EXPECT_EQ(cudaMemcpy(x.p, h.data(), 101 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), x.p + 50, 51 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), h.data() + 100, sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(x.p, h.data(), 100 * sizeof(float), cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(x.p, h.data(), 100 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(CudaEmulator, FreshDeviceMemoryReadsAsNaN) {
  DeviceArray<float> x(16);
  for (float v : x.Get()) EXPECT_TRUE(std::isnan(v));
}

TEST(CudaEmulator, AGraphReplaysItsLaunchesWithTheCapturedArguments) {
  constexpr int n = 1000;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  DeviceArray<int> x(n);
  x.Set(std::vector<int>(n, 0));
  int v = 5;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  AddKernel<<<2, 128, 0, s>>>(x.p, n, v);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_EQ(x.Get(), std::vector<int>(n, 0));  // captured, not run
  v = 100;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(x.Get(), std::vector<int>(n, 10));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // A synchronous call during the capture fails and spoils it.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  AddKernel<<<2, 128, 0, s>>>(x.p, n, 1);
  std::vector<int> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), x.p, n * sizeof(int), cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  // So does a copy from pageable memory, whose contents a replay could not know.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(x.p, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, s),
            cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(x.Get(), std::vector<int>(n, 10));  // nothing of the spoilt captures ran
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// D (m x n) = op(A) · op(B) + beta · C, column-major, over `batch` strided products, against a
// double-precision loop over the same definition.
void CheckMatmul(bool bf16, bool ta, bool tb, int m, int n, int k, int batch, float beta) {
  SCOPED_TRACE(::testing::Message() << (bf16 ? "bf16" : "fp32") << " ta " << ta << " tb " << tb << " batch " << batch);
  const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  const int64_t lda = a_rows + 3, ldb = b_rows + 1, ldc = m + 2;
  const int64_t sa = lda * a_cols + 5, sb = ldb * b_cols, sc = ldc * n;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(sa * batch), b(sb * batch), c(sc * batch);
  for (float& x : a) x = bf16 ? FromBf16(ToBf16(u(rng))) : u(rng);
  for (float& x : b) x = bf16 ? FromBf16(ToBf16(u(rng))) : u(rng);
  for (float& x : c) x = u(rng);
  const size_t esize = bf16 ? 2 : 4;
  void *da, *db;
  float* dc;
  ASSERT_EQ(cudaMalloc(&da, a.size() * esize), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * esize), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, c.size() * 4), cudaSuccess);
  auto upload = [&](void* d, const std::vector<float>& h) {
    if (!bf16) return cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    std::vector<uint16_t> hb(h.size());
    for (size_t i = 0; i < h.size(); ++i) hb[i] = ToBf16(h[i]);
    return cudaMemcpy(d, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice);
  };
  ASSERT_EQ(upload(da, a), cudaSuccess);
  ASSERT_EQ(upload(db, b), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);

  cublasLtHandle_t handle;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), CUBLAS_STATUS_SUCCESS);
  const cudaDataType in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtMatrixLayout_t la, lb, lc;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, in, a_rows, a_cols, lda), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, in, b_rows, b_cols, ldb), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc), CUBLAS_STATUS_SUCCESS);
  const int64_t strides[3] = {sa, sb, sc};
  cublasLtMatrixLayout_t layouts[3] = {la, lb, lc};
  for (int i = 0; i < 3 && batch > 1; ++i) {
    const int32_t count = batch;
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                               sizeof(strides[i])),
              CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasLtMatmulPreference_t pref;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, pref, 1, &result, &found), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(found, 1);
  const float alpha = 1.0f;
  ASSERT_EQ(cublasLtMatmul(handle, desc, &alpha, da, la, db, lb, &beta, dc, lc, dc, lc, &result.algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> got(c.size());
  ASSERT_EQ(cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int q = 0; q < batch; ++q) {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        double want = beta * double(c[q * sc + i + j * ldc]);
        for (int p = 0; p < k; ++p) {
          const double x = ta ? a[q * sa + p + i * lda] : a[q * sa + i + p * lda];
          const double y = tb ? b[q * sb + j + p * ldb] : b[q * sb + p + j * ldb];
          want += x * y;
        }
        ASSERT_NEAR(got[q * sc + i + j * ldc], want, 1e-5 * (1 + k)) << "D(" << i << ", " << j << ") of batch " << q;
      }
    }
  }
  // A B whose rows do not match op(A)'s columns is refused.
  cublasLtMatrixLayout_t wrong;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&wrong, in, b_rows + 1, b_cols, ldb + 1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(handle, desc, &alpha, da, la, db, wrong, &beta, dc, lc, dc, lc, &result.algo, nullptr, 0,
                           nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  for (auto l : {la, lb, lc, wrong}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

TEST(CudaEmulator, CublasLtComputesTheDocumentedProduct) {
  for (bool bf16 : {false, true}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) CheckMatmul(bf16, ta, tb, 7, 5, 19, 1, 0.0f);
    }
    CheckMatmul(bf16, true, false, 6, 4, 33, 3, 1.0f);
  }
}

TEST(CudaEmulator, CublasLtRefusesOperandsOutsideDeviceMemory) {
  cublasLtHandle_t handle;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t l;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  DeviceArray<float> small(15), ok(16);
  std::vector<float> host(16);
  cublasLtMatmulAlgo_t algo{};
  const float alpha = 1, beta = 0;
  EXPECT_EQ(cublasLtMatmul(handle, desc, &alpha, ok.p, l, ok.p, l, &beta, ok.p, l, ok.p, l, &algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(handle, desc, &alpha, small.p, l, ok.p, l, &beta, ok.p, l, ok.p, l, &algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmul(handle, desc, &alpha, ok.p, l, host.data(), l, &beta, ok.p, l, ok.p, l, &algo, nullptr, 0,
                           nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
}

}  // namespace
