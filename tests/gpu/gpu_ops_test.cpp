// Every CUDA kernel against a CPU reference built from the engine's own dequantizers and plain
// float math, with llama.cpp's test-backend-ops measure (normalized MSE <= 5e-4). Prints one
// PASS/FAIL line per check; exits 0 with a SKIP line when there is no CUDA device.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/dequantize.h"
#include "engine/gguf/tensor_type.h"
#include "kernels/cuda/cuda_kernels.h"
#include "tests/gpu/gpu_check.h"

using namespace shoal;
using gguf::TensorType;

namespace {

constexpr double kMaxNmse = 5e-4;

size_t sz_t(int64_t v) { return static_cast<size_t>(v); }

// Device buffer of T, freed at scope end.
template <typename T>
struct Buf {
  T* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) {
    if (cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)) != cudaSuccess)
      throw std::bad_alloc();
  }
  Buf(const std::vector<T>& v) : Buf(v.size()) {
    cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Buf() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
};

std::vector<float> randomVector(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::string fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "nmse=%.3g", v);
  return b;
}

void checkLastError(gpu_test::Tally& t, const std::string& name) {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) t.fail(name, std::string("CUDA error ") + cudaGetErrorString(e));
}

void testMatvec(gpu_test::Tally& tally, TensorType type, int64_t tokens, std::mt19937& rng) {
  const int64_t rows = 96, k = 512;
  const std::string name = "matvec " + gguf::typeName(type) + " tokens=" + std::to_string(tokens);
  const std::vector<float> w = randomVector(sz_t(rows * k), rng, 0.5f);
  const size_t rowBytes = gguf::rowBytes(type, k);
  std::vector<uint8_t> wq(rowBytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) gguf::quantizeRow(type, &w[r * k], &wq[r * rowBytes], k);
  // Reference: the weights as the engine decodes them, times float activations.
  std::vector<float> wd(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r) gguf::dequantizeRow(type, &wq[r * rowBytes], &wd[r * k], k);
  const std::vector<float> x = randomVector(static_cast<size_t>(tokens * k), rng);
  std::vector<float> want(static_cast<size_t>(tokens * rows));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(wd[r * k + i]) * x[t * k + i];
      want[t * rows + r] = static_cast<float>(acc);
    }
  Buf<uint8_t> dw(wq);
  Buf<float> dx(x), dy(want.size());
  Buf<int8_t> dq(x.size());
  Buf<float2> dds(x.size() / 32);
  cuda::quantizeActivations(dx.p, tokens, k, dq.p, dds.p, nullptr);
  cuda::matvec(type, dw.p, rows, k, static_cast<int64_t>(rowBytes), dq.p, dds.p, dx.p, tokens, dy.p,
               nullptr);
  checkLastError(tally, name);
  const double e = gpu_test::nmse(dy.get(), want);
  tally.expect(e <= kMaxNmse, name, fmt(e));

  // The same weights through the f16 path of batches.
  const std::string dname = "dequantizeToHalf " + gguf::typeName(type);
  Buf<__half> dh(wd.size());
  cuda::dequantizeToHalf(type, dw.p, rows, k, static_cast<int64_t>(rowBytes), dh.p, nullptr);
  checkLastError(tally, dname);
  std::vector<__half> h(wd.size());
  cudaMemcpy(h.data(), dh.p, h.size() * sizeof(__half), cudaMemcpyDeviceToHost);
  std::vector<float> hf(h.size());
  for (size_t i = 0; i < h.size(); ++i) hf[i] = __half2float(h[i]);
  const double e2 = gpu_test::nmse(hf, wd);
  tally.expect(e2 <= 1e-6, dname, fmt(e2));
}

void testRmsNormSwiglu(gpu_test::Tally& tally, std::mt19937& rng) {
  const int64_t rows = 3, n = 576;
  const auto x = randomVector(sz_t(rows * n), rng), w = randomVector(sz_t(n), rng);
  std::vector<float> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double scale = 1.0 / std::sqrt(s / n + 1e-5);
    for (int64_t i = 0; i < n; ++i)
      want[r * n + i] = static_cast<float>(x[r * n + i] * scale * w[i]);
  }
  Buf<float> dx(x), dw(w), dy(x.size());
  cuda::rmsNorm(dx.p, dw.p, dy.p, rows, n, 1e-5f, nullptr);
  checkLastError(tally, "rmsNorm");
  const double e = gpu_test::nmse(dy.get(), want);
  tally.expect(e <= kMaxNmse, "rmsNorm", fmt(e));

  // The HeadNorm op: in place, over rows of one head (64), tokens x heads rows.
  const int64_t headRows = 3 * 8, hd = 64;
  const auto hx = randomVector(sz_t(headRows * hd), rng), hw = randomVector(sz_t(hd), rng);
  std::vector<float> hwant(hx.size());
  for (int64_t r = 0; r < headRows; ++r) {
    double s = 0;
    for (int64_t i = 0; i < hd; ++i) s += static_cast<double>(hx[r * hd + i]) * hx[r * hd + i];
    const double scale = 1.0 / std::sqrt(s / hd + 1e-6);
    for (int64_t i = 0; i < hd; ++i)
      hwant[r * hd + i] = static_cast<float>(hx[r * hd + i] * scale * hw[i]);
  }
  Buf<float> dhx(hx), dhw(hw);
  cuda::rmsNorm(dhx.p, dhw.p, dhx.p, headRows, hd, 1e-6f, nullptr);
  checkLastError(tally, "rmsNorm in place (head norm)");
  const double eh = gpu_test::nmse(dhx.get(), hwant);
  tally.expect(eh <= kMaxNmse, "rmsNorm in place (head norm)", fmt(eh));

  const auto up = randomVector(x.size(), rng);
  Buf<float> du(up);
  std::vector<float> sw(x.size());
  for (size_t i = 0; i < x.size(); ++i) sw[i] = x[i] / (1.0f + std::exp(-x[i])) * up[i];
  cuda::swiglu(dx.p, du.p, dy.p, static_cast<int64_t>(x.size()), nullptr);
  checkLastError(tally, "swiglu");
  const double e2 = gpu_test::nmse(dy.get(), sw);
  tally.expect(e2 <= kMaxNmse, "swiglu", fmt(e2));
}

// RoPE from angle tables (as the stage builds them with cpu::ropeAngles: one row of hd/2
// cosines and sines per position), for positions pos0.. of three tokens.
void testRope(gpu_test::Tally& tally, bool neox, std::mt19937& rng) {
  const int32_t heads = 4, hd = 64, tokens = 3, pos0 = 17, half = hd / 2;
  const float base = 10000.0f;
  auto x = randomVector(sz_t(tokens * heads * hd), rng);
  std::vector<float> want = x;
  const float thetaScale = std::pow(base, -2.0f / hd);
  std::vector<float> cosTable(sz_t((pos0 + tokens) * half)), sinTable(cosTable.size());
  for (int32_t p = 0; p < pos0 + tokens; ++p) {
    float theta = static_cast<float>(p);
    for (int32_t i = 0; i < half; ++i, theta *= thetaScale) {
      cosTable[sz_t(p * half + i)] = std::cos(theta);
      sinTable[sz_t(p * half + i)] = std::sin(theta);
    }
  }
  for (int32_t t = 0; t < tokens; ++t)
    for (int32_t h = 0; h < heads; ++h) {
      float* v = &want[sz_t((t * heads + h) * hd)];
      for (int32_t i = 0; i < half; ++i) {
        const float c = cosTable[sz_t((pos0 + t) * half + i)];
        const float s = sinTable[sz_t((pos0 + t) * half + i)];
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  Buf<float> dx(x), dcos(cosTable), dsin(sinTable);
  Buf<int32_t> dpos(std::vector<int32_t>{pos0});
  cuda::RopeShape shape;
  shape.heads = heads;
  shape.headDim = hd;
  shape.nRot = hd;
  shape.neox = neox;
  cuda::rope(dx.p, tokens, shape, dcos.p, dsin.p, dpos.p, nullptr);
  const std::string name = neox ? "rope neox" : "rope normal";
  checkLastError(tally, name);
  const double e = gpu_test::nmse(dx.get(), want);
  tally.expect(e <= kMaxNmse, name, fmt(e));
}

// Attention of `tokens` new tokens at positions pos0.. over a cache holding pos0 + tokens
// positions, GQA 8 heads over 2 KV heads, for a short and a split (long) context.
void testAttention(gpu_test::Tally& tally, int32_t pos0, int32_t tokens, std::mt19937& rng) {
  const int32_t nHead = 8, nKv = 2, hd = 64, ctx = 2048, kvDim = nKv * hd;
  const std::string name =
      "attention pos0=" + std::to_string(pos0) + " tokens=" + std::to_string(tokens);
  const auto q = randomVector(sz_t(tokens * nHead * hd), rng);
  auto kf = randomVector(sz_t(ctx * kvDim), rng), vf = randomVector(sz_t(ctx * kvDim), rng);
  std::vector<__half> kh(kf.size()), vh(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) {
    kh[i] = __float2half(kf[i]);
    vh[i] = __float2half(vf[i]);
    kf[i] = __half2float(kh[i]);
    vf[i] = __half2float(vh[i]);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> want(q.size());
  for (int32_t t = 0; t < tokens; ++t)
    for (int32_t h = 0; h < nHead; ++h) {
      const int32_t kvh = h / (nHead / nKv), visible = pos0 + t + 1;
      std::vector<double> s(sz_t(visible));
      double m = -INFINITY;
      for (int32_t p = 0; p < visible; ++p) {
        double d = 0;
        for (int32_t i = 0; i < hd; ++i)
          d += q[sz_t((t * nHead + h) * hd + i)] * kf[sz_t(p * kvDim + kvh * hd + i)];
        s[sz_t(p)] = d * scale;
        m = std::max(m, s[sz_t(p)]);
      }
      double l = 0;
      for (double& v : s) l += (v = std::exp(v - m));
      for (int32_t i = 0; i < hd; ++i) {
        double a = 0;
        for (int32_t p = 0; p < visible; ++p) a += s[sz_t(p)] * vf[sz_t(p * kvDim + kvh * hd + i)];
        want[sz_t((t * nHead + h) * hd + i)] = static_cast<float>(a / l);
      }
    }
  cuda::AttentionParams p;
  p.nHead = nHead;
  p.nHeadKv = nKv;
  p.headDim = hd;
  p.scale = scale;
  p.chunk = 256;
  p.splits = ctx / 256;
  Buf<float> dq(q), dout(q.size()), dpart(sz_t(tokens * nHead * p.splits * (hd + 2)));
  Buf<__half> dk(kh), dv(vh);
  Buf<int32_t> dpos(std::vector<int32_t>{pos0});
  cuda::attention(p, dq.p, dk.p, dv.p, tokens, dpos.p, dpart.p, dout.p, nullptr);
  checkLastError(tally, name);
  const double e = gpu_test::nmse(dout.get(), want);
  tally.expect(e <= kMaxNmse, name, fmt(e));
}

void testGatherAndArgmax(gpu_test::Tally& tally, std::mt19937& rng) {
  const int64_t rows = 40, k = 256;
  const auto w = randomVector(sz_t(rows * k), rng);
  const size_t rb = gguf::rowBytes(TensorType::Q8_0, k);
  std::vector<uint8_t> wq(rb * rows);
  for (int64_t r = 0; r < rows; ++r)
    gguf::quantizeRow(TensorType::Q8_0, &w[sz_t(r * k)], &wq[r * rb], k);
  const std::vector<int32_t> ids{7, 0, 39, 7};
  std::vector<float> want(ids.size() * sz_t(k));
  for (size_t i = 0; i < ids.size(); ++i)
    gguf::dequantizeRow(TensorType::Q8_0, &wq[sz_t(ids[i]) * rb], &want[i * sz_t(k)], k);
  Buf<uint8_t> dw(wq);
  Buf<int32_t> did(ids);
  Buf<float> dout(want.size());
  cuda::gatherRows(TensorType::Q8_0, dw.p, did.p, static_cast<int64_t>(ids.size()), k,
                   static_cast<int64_t>(rb), dout.p, nullptr);
  checkLastError(tally, "gatherRows q8_0");
  const double e = gpu_test::nmse(dout.get(), want);
  tally.expect(e <= 1e-10, "gatherRows q8_0", fmt(e));

  auto logits = randomVector(50000, rng);
  logits[31337] = 100.0f;
  logits[40000] = 100.0f;  // a tie: the first index wins
  Buf<float> dl(logits);
  Buf<int32_t> dbest(1);
  cuda::argmax(dl.p, static_cast<int64_t>(logits.size()), dbest.p, nullptr);
  checkLastError(tally, "argmax");
  const int32_t best = dbest.get()[0];
  tally.expect(best == 31337, "argmax", "got " + std::to_string(best) + ", want 31337");
}

}  // namespace

int main() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("SKIP gpu_ops_test: no CUDA device (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  gpu_test::Tally tally;
  std::mt19937 rng(42);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0, TensorType::Q4_K,
                          TensorType::Q6_K, TensorType::F16}) {
    for (int64_t tokens : {1, 3}) {
      try {
        testMatvec(tally, type, tokens, rng);
      } catch (const std::exception& e) {
        tally.fail("matvec " + gguf::typeName(type), e.what());
      }
    }
  }
  try {
    testRmsNormSwiglu(tally, rng);
    testRope(tally, false, rng);
    testRope(tally, true, rng);
    testAttention(tally, 0, 1, rng);
    testAttention(tally, 1500, 1, rng);  // split-K decode: 6 splits with work, 2 empty
    testAttention(tally, 100, 5, rng);   // a batch (prefill) continuing a cache
    testGatherAndArgmax(tally, rng);
  } catch (const std::exception& e) {
    tally.fail("ops", e.what());
  }
  return tally.finish();
}
