#pragma once
// The CPU backend: one device (this machine's processors), always available.

#include <memory>

#include "engine/runtime/backend.h"

namespace shoal::cpu {

class ThreadPool;

class CpuBackend final : public runtime::Backend {
 public:
  // threads <= 0: one per physical core (the hardware concurrency when that is unknown).
  explicit CpuBackend(int threads = 0);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  runtime::Availability availability() const override { return {true, {}}; }
  std::vector<runtime::DeviceInfo> devices() const override;
  std::unique_ptr<runtime::Stage> createStage(const std::string& deviceId,
                                              const runtime::ModelSource& model,
                                              const runtime::StageSpec& spec) override;

  int threads() const { return m_threads; }

 private:
  int m_threads;
  std::shared_ptr<ThreadPool> m_pool;  // shared by all stages of this backend
};

// Default thread count: physical cores of this machine (at least 1).
int defaultCpuThreads();

}  // namespace shoal::cpu
