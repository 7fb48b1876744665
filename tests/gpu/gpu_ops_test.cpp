// Every CUDA kernel against a CPU reference built from the engine's own dequantizers and plain
// float math, with llama.cpp's test-backend-ops measure (normalized MSE <= 5e-4). Prints one
// PASS/FAIL line per check; exits 0 with a SKIP line when there is no CUDA device.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
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

  // The fused norm + quantize: the same outputs as rmsNorm, and the same bytes as quantizing
  // them.
  {
    Buf<float> fy(x.size()), ny(x.size());
    Buf<int8_t> fq(x.size()), nq(x.size());
    Buf<float2> fds(x.size() / 32), nds(x.size() / 32);
    cuda::rmsNorm(dx.p, dw.p, ny.p, rows, n, 1e-5f, nullptr);
    cuda::quantizeActivations(ny.p, rows, n, nq.p, nds.p, nullptr);
    cuda::rmsNormQuantize(dx.p, dw.p, fy.p, rows, n, 1e-5f, fq.p, fds.p, nullptr);
    checkLastError(tally, "rmsNormQuantize");
    const auto a = fds.get(), b = nds.get();
    bool sameScales = a.size() == b.size();
    for (size_t i = 0; sameScales && i < a.size(); ++i) {
      sameScales = a[i].x == b[i].x && a[i].y == b[i].y;
    }
    tally.expect(fy.get() == ny.get() && fq.get() == nq.get() && sameScales, "rmsNormQuantize",
                 "== rmsNorm then quantizeActivations");

    // With the residual add first: the same sums, and the same norm and bytes of them.
    const auto residual = randomVector(x.size(), rng);
    Buf<float> sumPlain(residual), sumFused(residual);
    cuda::addInPlace(sumPlain.p, dx.p, static_cast<int64_t>(x.size()), nullptr);
    cuda::rmsNorm(sumPlain.p, dw.p, ny.p, rows, n, 1e-5f, nullptr);
    cuda::quantizeActivations(ny.p, rows, n, nq.p, nds.p, nullptr);
    cuda::addRmsNormQuantize(sumFused.p, dx.p, dw.p, fy.p, rows, n, 1e-5f, fq.p, fds.p, nullptr);
    checkLastError(tally, "addRmsNormQuantize");
    const auto c = fds.get(), d = nds.get();
    bool sameScales2 = c.size() == d.size();
    for (size_t i = 0; sameScales2 && i < c.size(); ++i) {
      sameScales2 = c[i].x == d[i].x && c[i].y == d[i].y;
    }
    tally.expect(sumFused.get() == sumPlain.get() && fy.get() == ny.get() && fq.get() == nq.get() &&
                     sameScales2,
                 "addRmsNormQuantize", "== addInPlace, rmsNorm, quantizeActivations");
  }

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

// The newer architectures' attention options (cuda::AttentionParams).
struct AttentionOptions {
  int32_t window = 0;     // sliding window (positions)
  int32_t ring = 0;       // the cache as a ring of this many positions
  float softcap = 0;      // gemma2's soft-capping of Q·K
  bool sinks = false;     // gpt-oss's per-head sink logits
  bool oneSplit = false;  // one split over the whole context, as the stage runs several rows
};

// Attention of `tokens` new tokens at positions pos0.. over a cache holding pos0 + tokens
// positions, GQA 8 heads over 2 KV heads, for a short and a split (long) context; with options,
// a window over a ring cache (filled position by position, so a slot holds the newest position
// that maps to it), soft-capped scores, sinks.
void testAttention(gpu_test::Tally& tally, int32_t pos0, int32_t tokens, std::mt19937& rng,
                   const AttentionOptions& o = {}) {
  const int32_t nHead = 8, nKv = 2, hd = 64, ctx = 2048, kvDim = nKv * hd;
  std::string name = "attention pos0=" + std::to_string(pos0) + " tokens=" + std::to_string(tokens);
  if (o.window > 0) name += " window=" + std::to_string(o.window);
  if (o.ring > 0) name += " ring=" + std::to_string(o.ring);
  if (o.softcap > 0) name += " softcap";
  if (o.sinks) name += " sinks";
  if (o.oneSplit) name += " one split";
  const auto sinks = randomVector(sz_t(nHead), rng, 2.0f);
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
      const int32_t first = o.window > 0 ? std::max(0, visible - o.window) : 0;
      std::vector<double> s(sz_t(visible), -INFINITY);
      double m = o.sinks ? sinks[sz_t(h)] : -INFINITY;
      for (int32_t p = first; p < visible; ++p) {
        double d = 0;
        for (int32_t i = 0; i < hd; ++i)
          d += q[sz_t((t * nHead + h) * hd + i)] * kf[sz_t(p * kvDim + kvh * hd + i)];
        if (o.softcap > 0) d = std::tanh(d / o.softcap) * o.softcap;
        s[sz_t(p)] = d * scale;
        m = std::max(m, s[sz_t(p)]);
      }
      double l = o.sinks ? std::exp(sinks[sz_t(h)] - m) : 0.0;
      for (double& v : s) l += (v = std::exp(v - m));
      for (int32_t i = 0; i < hd; ++i) {
        double a = 0;
        for (int32_t p = first; p < visible; ++p)
          a += s[sz_t(p)] * vf[sz_t(p * kvDim + kvh * hd + i)];
        want[sz_t((t * nHead + h) * hd + i)] = static_cast<float>(a / l);
      }
    }
  cuda::AttentionParams p;
  p.nHead = nHead;
  p.nHeadKv = nKv;
  p.headDim = hd;
  p.scale = scale;
  p.chunk = o.oneSplit ? ctx : 256;
  p.splits = o.oneSplit ? 1 : ctx / 256;
  p.window = o.window;
  p.ring = o.ring;
  p.softcap = o.softcap;
  Buf<float> dsinks(sinks);
  p.sinks = o.sinks ? dsinks.p : nullptr;
  if (o.ring > 0) {  // positions written in order: each slot keeps the newest of its positions
    std::vector<__half> rk(sz_t(o.ring * kvDim)), rv(rk.size());
    for (int32_t pos = 0; pos < pos0 + tokens; ++pos) {
      for (int32_t i = 0; i < kvDim; ++i) {
        rk[sz_t((pos % o.ring) * kvDim + i)] = kh[sz_t(pos * kvDim + i)];
        rv[sz_t((pos % o.ring) * kvDim + i)] = vh[sz_t(pos * kvDim + i)];
      }
    }
    kh = rk;
    vh = rv;
  }
  Buf<float> dq(q), dout(q.size()), dpart(sz_t(tokens * nHead * p.splits * (hd + 2)));
  Buf<__half> dk(kh), dv(vh);
  Buf<int32_t> dpos(std::vector<int32_t>{pos0});
  cuda::attention(p, dq.p, dk.p, dv.p, tokens, dpos.p, dpart.p, dout.p, nullptr);
  checkLastError(tally, name);
  const std::vector<float> got = dout.get();
  const double e = gpu_test::nmse(got, want);
  tally.expect(e <= kMaxNmse, name, fmt(e));

  // The merge done by each (token, head)'s last split: the same code as the merge kernel (within
  // rounding: another kernel may contract it differently), twice in a row (the tickets reset
  // themselves, as a replayed decode graph needs).
  Buf<unsigned> tickets(sz_t(tokens * nHead));
  cudaMemset(tickets.p, 0, tickets.n * sizeof(unsigned));
  p.tickets = tickets.p;
  bool same = true;
  for (int run = 0; run < 2; ++run) {
    Buf<float> fused(q.size());
    cuda::attention(p, dq.p, dk.p, dv.p, tokens, dpos.p, dpart.p, fused.p, nullptr);
    checkLastError(tally, name + " fused merge");
    same = same && gpu_test::nmse(fused.get(), got) <= 1e-10;
  }
  const std::vector<unsigned> left = tickets.get();
  same = same && std::all_of(left.begin(), left.end(), [](unsigned v) { return v == 0; });
  tally.expect(same, name + " fused merge",
               "the merge kernel's numbers (nmse <= 1e-10), twice; tickets back to 0");
}

// The fused decode launches against the plain ones they replace: three matrices of one type in
// one launch (bit for bit: the same per-row code), and gate + up + activation in one.
void testFusedMatvec(gpu_test::Tally& tally, TensorType type, std::mt19937& rng) {
  const int64_t k = 512, tokens = 2;
  const int64_t rows[3] = {96, 32, 64};
  const size_t rb = gguf::rowBytes(type, k);
  std::vector<std::vector<uint8_t>> w;
  for (const int64_t r : rows) {
    const auto f = randomVector(sz_t(r * k), rng, 0.5f);
    std::vector<uint8_t> q(rb * sz_t(r));
    for (int64_t i = 0; i < r; ++i) gguf::quantizeRow(type, &f[sz_t(i * k)], &q[sz_t(i) * rb], k);
    w.push_back(q);
  }
  const auto x = randomVector(sz_t(tokens * k), rng);
  Buf<float> dx(x);
  Buf<int8_t> dq(x.size());
  Buf<float2> dds(x.size() / 32);
  cuda::quantizeActivations(dx.p, tokens, k, dq.p, dds.p, nullptr);
  Buf<uint8_t> w0(w[0]), w1(w[1]), w2(w[2]);
  const uint8_t* ws[3] = {w0.p, w1.p, w2.p};
  std::vector<std::vector<float>> plain;
  for (int i = 0; i < 3; ++i) {
    Buf<float> y(sz_t(tokens * rows[i]));
    cuda::matvec(type, ws[i], rows[i], k, static_cast<int64_t>(rb), dq.p, dds.p, dx.p, tokens, y.p,
                 nullptr);
    plain.push_back(y.get());
  }
  Buf<float> y0(plain[0].size()), y1(plain[1].size()), y2(plain[2].size());
  const cuda::MatvecTarget targets[3] = {{w0.p, rows[0], static_cast<int64_t>(rb), y0.p},
                                         {w1.p, rows[1], static_cast<int64_t>(rb), y1.p},
                                         {w2.p, rows[2], static_cast<int64_t>(rb), y2.p}};
  cuda::matvecSet(type, targets, 3, k, dq.p, dds.p, tokens, nullptr);
  const std::string name = "matvecSet " + gguf::typeName(type);
  checkLastError(tally, name);
  tally.expect(y0.get() == plain[0] && y1.get() == plain[1] && y2.get() == plain[2], name,
               "== three matvecs");

  // Gate (rows 0-31 of matrix 2's 64) and up (its rows 32-63) of one matrix, as phi3's fused
  // gate/up, through each activation.
  for (const auto& [act, label] : {std::pair{cuda::GateActivation::Silu, "silu"},
                                   std::pair{cuda::GateActivation::GeluTanh, "gelu"},
                                   std::pair{cuda::GateActivation::SwigluOai, "swiglu-oai"}}) {
    const int64_t half = rows[2] / 2;
    Buf<float> gate(sz_t(tokens * half)), up(sz_t(tokens * half)), fused(sz_t(tokens * half));
    cuda::matvec(type, w2.p, half, k, static_cast<int64_t>(rb), dq.p, dds.p, dx.p, tokens, gate.p,
                 nullptr);
    cuda::matvec(type, w2.p + half * static_cast<int64_t>(rb), half, k, static_cast<int64_t>(rb),
                 dq.p, dds.p, dx.p, tokens, up.p, nullptr);
    const int64_t n = tokens * half;
    if (act == cuda::GateActivation::Silu) cuda::swiglu(gate.p, up.p, gate.p, n, nullptr);
    if (act == cuda::GateActivation::GeluTanh) cuda::geglu(gate.p, up.p, gate.p, n, nullptr);
    if (act == cuda::GateActivation::SwigluOai) cuda::swigluOai(gate.p, up.p, gate.p, n, nullptr);
    cuda::matvecGated(type, w2.p, w2.p + half * static_cast<int64_t>(rb), half, k,
                      static_cast<int64_t>(rb), act, dq.p, dds.p, tokens, fused.p, nullptr);
    const std::string gname = "matvecGated " + gguf::typeName(type) + " " + label;
    checkLastError(tally, gname);
    // The products are the same code; the activation may contract into fmas differently in
    // another kernel, so within rounding rather than bit for bit.
    const double e = gpu_test::nmse(fused.get(), gate.get());
    tally.expect(e <= 1e-10, gname, "vs two matvecs and the activation: " + fmt(e));
  }
}

// RoPE of queries and keys with the cache store in one launch, against rope, rope and storeKv:
// the same queries, and the same cache bytes (a partial rotation, nRot 32 of 64, and a ring).
void testRopeStore(gpu_test::Tally& tally, bool neox, std::mt19937& rng) {
  const int32_t qHeads = 8, kvHeads = 2, hd = 64, nRot = 32, tokens = 3, pos0 = 13, ring = 8;
  const int32_t half = nRot / 2, kvDim = kvHeads * hd;
  std::vector<float> cosTable(sz_t((pos0 + tokens) * half)), sinTable(cosTable.size());
  for (size_t i = 0; i < cosTable.size(); ++i) {
    cosTable[i] = std::cos(0.37f * static_cast<float>(i));
    sinTable[i] = std::sin(0.37f * static_cast<float>(i));
  }
  const auto q = randomVector(sz_t(tokens * qHeads * hd), rng);
  const auto k = randomVector(sz_t(tokens * kvDim), rng), v = randomVector(k.size(), rng);
  Buf<float> dcos(cosTable), dsin(sinTable);
  Buf<int32_t> dpos(std::vector<int32_t>{pos0});
  cuda::RopeShape qs{qHeads, hd, nRot, neox}, ks{kvHeads, hd, nRot, neox};
  // The plain way.
  Buf<float> q1(q), k1(k), v1(v);
  Buf<__half> kc1(sz_t(ring * kvDim)), vc1(sz_t(ring * kvDim));
  cudaMemset(kc1.p, 0, kc1.n * sizeof(__half));
  cudaMemset(vc1.p, 0, vc1.n * sizeof(__half));
  cuda::rope(q1.p, tokens, qs, dcos.p, dsin.p, dpos.p, nullptr);
  cuda::rope(k1.p, tokens, ks, dcos.p, dsin.p, dpos.p, nullptr);
  cuda::storeKv(k1.p, v1.p, kc1.p, vc1.p, tokens, kvDim, dpos.p, ring, nullptr);
  // The fused way.
  Buf<float> q2(q), k2(k), v2(v);
  Buf<__half> kc2(kc1.n), vc2(vc1.n);
  cudaMemset(kc2.p, 0, kc2.n * sizeof(__half));
  cudaMemset(vc2.p, 0, vc2.n * sizeof(__half));
  cuda::ropeStore(q2.p, k2.p, v2.p, tokens, qs, ks, {dcos.p, dsin.p}, {dcos.p, dsin.p}, kc2.p,
                  vc2.p, ring, dpos.p, nullptr);
  const std::string name = std::string("ropeStore ") + (neox ? "neox" : "normal");
  checkLastError(tally, name);
  auto bits = [](const std::vector<__half>& h) {
    std::vector<uint16_t> out(h.size());
    std::memcpy(out.data(), h.data(), h.size() * sizeof(uint16_t));
    return out;
  };
  tally.expect(q2.get() == q1.get() && bits(kc2.get()) == bits(kc1.get()) &&
                   bits(vc2.get()) == bits(vc1.get()) && k2.get() == k,
               name, "== rope, rope, storeKv (keys left unrotated in their buffer)");
}

// The cache append: keys and values as f16 at positions pos0.., in a ring of 8 positions.
void testStoreKvRing(gpu_test::Tally& tally, std::mt19937& rng) {
  const int32_t kvDim = 64, tokens = 5, pos0 = 6, ring = 8;
  const auto k = randomVector(sz_t(tokens * kvDim), rng), v = randomVector(k.size(), rng);
  std::vector<float> wantK(sz_t(ring * kvDim), 0.0f), wantV(wantK.size(), 0.0f);
  for (int32_t t = 0; t < tokens; ++t) {
    for (int32_t i = 0; i < kvDim; ++i) {
      const size_t at = sz_t(((pos0 + t) % ring) * kvDim + i);
      wantK[at] = __half2float(__float2half(k[sz_t(t * kvDim + i)]));
      wantV[at] = __half2float(__float2half(v[sz_t(t * kvDim + i)]));
    }
  }
  Buf<float> dk(k), dv(v);
  Buf<__half> ck(wantK.size()), cv(wantV.size());
  cudaMemset(ck.p, 0, wantK.size() * sizeof(__half));
  cudaMemset(cv.p, 0, wantV.size() * sizeof(__half));
  Buf<int32_t> dpos(std::vector<int32_t>{pos0});
  cuda::storeKv(dk.p, dv.p, ck.p, cv.p, tokens, kvDim, dpos.p, ring, nullptr);
  checkLastError(tally, "storeKv ring");
  std::vector<float> gotK, gotV;
  for (const __half h : ck.get()) gotK.push_back(__half2float(h));
  for (const __half h : cv.get()) gotV.push_back(__half2float(h));
  tally.expect(gotK == wantK && gotV == wantV, "storeKv ring", "slots p mod 8, f16-rounded");
}

// The activations of the newer FFNs and the elementwise scale and soft-cap, against double
// math: gates wide enough to reach GeGLU's +-10 cut-offs and the clamped SwiGLU's limit of 7.
void testActivations(gpu_test::Tally& tally, std::mt19937& rng) {
  const size_t n = 4096;
  auto gate = randomVector(n, rng, 5.0f);
  gate[0] = -12.0f;
  gate[1] = 11.0f;
  const auto up = randomVector(n, rng, 5.0f);
  std::vector<float> geglu(n), oai(n), scaled(n), capped(n);
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i], u = up[i];
    const double gelu =
        g <= -10  ? 0.0
        : g >= 10 ? g
                  : 0.5 * g * (1 + std::tanh(0.7978845608028654 * g * (1 + 0.044715 * g * g)));
    geglu[i] = static_cast<float>(gelu * u);
    const double gc = std::min(g, 7.0), uc = std::clamp(u, -7.0, 7.0);
    oai[i] = static_cast<float>(gc / (1 + std::exp(-1.702 * gc)) * (uc + 1));
    scaled[i] = static_cast<float>(g * 0.125);
    capped[i] = static_cast<float>(std::tanh(g / 3.0) * 3.0);
  }
  Buf<float> dg(gate), du(up), dy(n);
  auto check = [&](const char* name, const std::vector<float>& want, double limit) {
    checkLastError(tally, name);
    const double e = gpu_test::nmse(dy.get(), want);
    tally.expect(e <= limit, name, fmt(e));
  };
  cuda::geglu(dg.p, du.p, dy.p, static_cast<int64_t>(n), nullptr);
  check("geglu", geglu, 1e-6);
  cuda::swigluOai(dg.p, du.p, dy.p, static_cast<int64_t>(n), nullptr);
  check("swigluOai", oai, 1e-6);
  cudaMemcpy(dy.p, dg.p, n * sizeof(float), cudaMemcpyDeviceToDevice);
  cuda::scale(dy.p, 0.125f, static_cast<int64_t>(n), nullptr);
  check("scale", scaled, 1e-12);
  cudaMemcpy(dy.p, dg.p, n * sizeof(float), cudaMemcpyDeviceToDevice);
  cuda::softcap(dy.p, 3.0f, static_cast<int64_t>(n), nullptr);
  check("softcap", capped, 1e-6);
}

// The mixture-of-experts kernels against a host reference: routing (both gatings), the
// experts' products for token rows (Q4_K gate) and entry rows (Q8_0 down), their biases, and
// the weighted sum.
void testMoe(gpu_test::Tally& tally, std::mt19937& rng) {
  const int32_t experts = 16, used = 4;
  const int64_t rows = 3, k = 256, ff = 64, entries = rows * used;
  const auto logits = randomVector(sz_t(rows * experts), rng, 2.0f);
  Buf<float> dlogits(logits);
  for (const bool softmaxWeight : {false, true}) {
    const std::string name = softmaxWeight ? "moeRoute softmax-weight" : "moeRoute softmax";
    std::vector<int32_t> wantIds(sz_t(entries));
    std::vector<float> wantW(sz_t(entries));
    for (int64_t t = 0; t < rows; ++t) {
      const float* l = &logits[sz_t(t * experts)];
      std::vector<double> p(l, l + experts);
      if (!softmaxWeight) {
        const double m = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& v : p) sum += (v = std::exp(v - m));
        for (double& v : p) v /= sum;
      }
      std::vector<int32_t> order(sz_t(experts));
      for (int32_t e = 0; e < experts; ++e) order[sz_t(e)] = e;
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return p[sz_t(a)] > p[sz_t(b)]; });
      std::vector<double> w(sz_t(used));
      for (int32_t j = 0; j < used; ++j) w[sz_t(j)] = p[sz_t(order[sz_t(j)])];
      if (softmaxWeight) {
        double sum = 0;
        for (double& v : w) sum += (v = std::exp(v - w[0]));
        for (double& v : w) v /= sum;
      } else {
        double sum = 0;
        for (const double v : w) sum += v;
        for (double& v : w) v /= sum;
      }
      for (int32_t j = 0; j < used; ++j) {
        wantIds[sz_t(t * used + j)] = order[sz_t(j)];
        wantW[sz_t(t * used + j)] = static_cast<float>(w[sz_t(j)]);
      }
    }
    Buf<int32_t> dids(sz_t(entries));
    Buf<float> dw(sz_t(entries));
    cuda::moeRoute(dlogits.p, rows, experts, used, softmaxWeight, !softmaxWeight, dids.p, dw.p,
                   nullptr);
    checkLastError(tally, name);
    const double e = gpu_test::nmse(dw.get(), wantW);
    tally.expect(dids.get() == wantIds && e <= 1e-10, name, "ids equal, weights " + fmt(e));
  }

  // Experts' products: ids chosen on the host (every expert's rows used by some entry).
  std::vector<int32_t> ids(sz_t(entries));
  for (int64_t i = 0; i < entries; ++i) ids[sz_t(i)] = static_cast<int32_t>((i * 5 + 3) % experts);
  Buf<int32_t> dids(ids);
  auto quantized = [&](TensorType type, int64_t nRows, int64_t cols, std::vector<float>& decoded) {
    const auto w = randomVector(sz_t(nRows * cols), rng, 0.5f);
    const size_t rb = gguf::rowBytes(type, cols);
    std::vector<uint8_t> q(rb * sz_t(nRows));
    decoded.assign(w.size(), 0.0f);
    for (int64_t r = 0; r < nRows; ++r) {
      uint8_t* qr = q.data() + sz_t(r) * rb;
      gguf::quantizeRow(type, w.data() + r * cols, qr, cols);
      gguf::dequantizeRow(type, qr, decoded.data() + r * cols, cols);
    }
    return q;
  };
  // y[e] = W[expert ids[e]] · input(e) with input(e) the token's row or the entry's own.
  auto reference = [&](const std::vector<float>& wd, int64_t perExpert, int64_t cols,
                       const std::vector<float>& in, bool perEntry) {
    std::vector<float> y(sz_t(entries * perExpert));
    for (int64_t e = 0; e < entries; ++e) {
      const float* x = &in[sz_t((perEntry ? e : e / used) * cols)];
      for (int64_t r = 0; r < perExpert; ++r) {
        const float* row = &wd[sz_t((ids[sz_t(e)] * perExpert + r) * cols)];
        double acc = 0;
        for (int64_t i = 0; i < cols; ++i) acc += static_cast<double>(row[i]) * x[i];
        y[sz_t(e * perExpert + r)] = static_cast<float>(acc);
      }
    }
    return y;
  };
  struct Case {
    TensorType type;
    int64_t perExpert, cols;
    bool perEntry;
  };
  for (const Case c : {Case{TensorType::Q4_K, ff, k, false}, Case{TensorType::Q8_0, k, ff, true}}) {
    const std::string name = std::string("matvecExperts ") + gguf::typeName(c.type) +
                             (c.perEntry ? " entry rows" : " token rows");
    std::vector<float> wd;
    const auto wq = quantized(c.type, experts * c.perExpert, c.cols, wd);
    const int64_t inRows = c.perEntry ? entries : rows;
    const auto x = randomVector(sz_t(inRows * c.cols), rng);
    Buf<uint8_t> dwq(wq);
    Buf<float> dx(x), dy(sz_t(entries * c.perExpert));
    Buf<int8_t> dq(x.size());
    Buf<float2> dds(x.size() / 32);
    cuda::quantizeActivations(dx.p, inRows, c.cols, dq.p, dds.p, nullptr);
    cuda::matvecExperts(c.type, dwq.p, c.perExpert, c.cols,
                        static_cast<int64_t>(gguf::rowBytes(c.type, c.cols)), dids.p, entries, used,
                        c.perEntry, dq.p, dds.p, dx.p, dy.p, nullptr);
    checkLastError(tally, name);
    const double e = gpu_test::nmse(dy.get(), reference(wd, c.perExpert, c.cols, x, c.perEntry));
    tally.expect(e <= kMaxNmse, name, fmt(e));
  }

  // Biases per entry's expert, then the weighted sum in rank order.
  const auto y = randomVector(sz_t(entries * k), rng), bias = randomVector(sz_t(experts * k), rng);
  const auto weights = randomVector(sz_t(entries), rng);
  std::vector<float> biased(y.size()), combined(sz_t(rows * k));
  for (int64_t e = 0; e < entries; ++e)
    for (int64_t i = 0; i < k; ++i)
      biased[sz_t(e * k + i)] = y[sz_t(e * k + i)] + bias[sz_t(ids[sz_t(e)] * k + i)];
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < k; ++i) {
      double sum = 0;
      for (int32_t j = 0; j < used; ++j)
        sum +=
            static_cast<double>(weights[sz_t(t * used + j)]) * biased[sz_t((t * used + j) * k + i)];
      combined[sz_t(t * k + i)] = static_cast<float>(sum);
    }
  Buf<float> dy(y), dbias(bias), dweights(weights), dout(combined.size());
  cuda::addExpertBias(dbias.p, dids.p, dy.p, entries, k, nullptr);
  checkLastError(tally, "addExpertBias");
  const double eb = gpu_test::nmse(dy.get(), biased);
  tally.expect(eb <= 1e-12, "addExpertBias", fmt(eb));
  cuda::moeCombine(dy.p, dweights.p, dout.p, rows, used, k, nullptr);
  checkLastError(tally, "moeCombine");
  const double ec = gpu_test::nmse(dout.get(), combined);
  tally.expect(ec <= 1e-10, "moeCombine", fmt(ec));
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

  // Two rows: a tie in the first (the first index wins), a maximum near the end of the second.
  const int64_t vocab = 50000;
  auto logits = randomVector(sz_t(2 * vocab), rng);
  logits[31337] = 100.0f;
  logits[40000] = 100.0f;
  logits[sz_t(vocab + 49998)] = 50.0f;
  Buf<float> dl(logits);
  Buf<int32_t> dbest(2);
  cuda::argmax(dl.p, 2, vocab, dbest.p, nullptr);
  checkLastError(tally, "argmax");
  const std::vector<int32_t> best = dbest.get();
  tally.expect(
      best == std::vector<int32_t>{31337, 49998}, "argmax rows",
      "got " + std::to_string(best[0]) + ", " + std::to_string(best[1]) + "; want 31337, 49998");
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
  for (TensorType type :
       {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
        TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
        TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4, TensorType::F16,
        TensorType::BF16}) {
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
    // The newer architectures' options: a window over a ring (positions 253-304 visible, the
    // ring of 96 holding 209-304), soft-capping and sinks, and a window over the whole cache.
    testAttention(tally, 300, 5, rng, {.window = 48, .ring = 96});
    testAttention(tally, 1500, 1, rng, {.window = 700, .softcap = 5.0f, .sinks = true});
    testAttention(tally, 100, 5, rng, {.sinks = true});
    testAttention(tally, 1500, 5, rng, {.oneSplit = true});  // a prefill batch's way
    testAttention(tally, 300, 5, rng, {.window = 48, .ring = 96, .sinks = true, .oneSplit = true});
    testStoreKvRing(tally, rng);
    testRopeStore(tally, false, rng);
    testRopeStore(tally, true, rng);
    testFusedMatvec(tally, TensorType::Q4_0, rng);
    testFusedMatvec(tally, TensorType::Q4_K, rng);
    testActivations(tally, rng);
    testMoe(tally, rng);
    testGatherAndArgmax(tally, rng);
  } catch (const std::exception& e) {
    tally.fail("ops", e.what());
  }
  return tally.finish();
}
