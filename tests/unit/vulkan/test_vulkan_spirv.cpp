// The embedded SPIR-V (kernels/vulkan/vk_shaders.h) read as words: no default shader variant
// declares the Float64 capability (consumer GPUs run fp64 at 1/32 to 1/64 of fp32, so only the
// opt-in "<name>_exact" variants may use it), every exact variant has its default twin, and the
// reader itself finds Float64 in the exact variants that round in double (so a passing check
// is not a reader that sees nothing). Needs no Vulkan device.

#include <QtTest>
#include <set>
#include <string>
#include <vector>

#include "kernels/vulkan/vk_shaders.h"

using shoal::vulkan::EmbeddedShader;

namespace {

constexpr uint32_t kSpirvMagic = 0x07230203;
constexpr uint32_t kHeaderWords = 5;
constexpr uint32_t kOpCapability = 17;       // SPIR-V specification: OpCapability
constexpr uint32_t kCapabilityFloat64 = 10;  // SPIR-V specification: Capability Float64

// The capabilities a module declares (OpCapability operands), or an error in `error`.
std::set<uint32_t> capabilities(const EmbeddedShader& shader, std::string& error) {
  std::set<uint32_t> out;
  if (shader.words < kHeaderWords || shader.code[0] != kSpirvMagic) {
    error = std::string(shader.name) + ": not a SPIR-V module";
    return out;
  }
  for (size_t i = kHeaderWords; i < shader.words;) {
    const uint32_t opcode = shader.code[i] & 0xffffu, count = shader.code[i] >> 16;
    if (count == 0 || i + count > shader.words) {
      error = std::string(shader.name) + ": malformed instruction at word " + std::to_string(i);
      return out;
    }
    if (opcode == kOpCapability && count == 2) out.insert(shader.code[i + 1]);
    i += count;
  }
  return out;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

class VulkanSpirvTest : public QObject {
  Q_OBJECT

 private slots:
  void noDefaultVariantDeclaresFloat64() {
    int defaults = 0;
    for (const EmbeddedShader& shader : shoal::vulkan::embeddedShaders()) {
      const std::string name = shader.name;
      if (endsWith(name, "_exact")) continue;
      std::string error;
      const std::set<uint32_t> caps = capabilities(shader, error);
      QVERIFY2(error.empty(), error.c_str());
      QVERIFY2(!caps.count(kCapabilityFloat64),
               qPrintable(QString::fromStdString(name) + " declares the Float64 capability"));
      ++defaults;
    }
    qInfo("%d default shader variants, none with Float64", defaults);
    QVERIFY(defaults > 0);
  }

  void everyExactVariantHasItsDefaultTwin() {
    std::set<std::string> names;
    for (const EmbeddedShader& shader : shoal::vulkan::embeddedShaders()) names.insert(shader.name);
    for (const std::string& name : names) {
      if (!endsWith(name, "_exact")) continue;
      const std::string twin = name.substr(0, name.size() - 6);
      QVERIFY2(names.count(twin), qPrintable(QString::fromStdString(name + " without " + twin)));
    }
  }

  // The reader sees Float64 where it is: the exact RMSNorm sums in double.
  void theReaderFindsFloat64InAnExactVariant() {
    for (const EmbeddedShader& shader : shoal::vulkan::embeddedShaders()) {
      if (std::string(shader.name) != "rms_norm_exact") continue;
      std::string error;
      QVERIFY(capabilities(shader, error).count(kCapabilityFloat64));
      QVERIFY(error.empty());
      return;
    }
    QFAIL("no rms_norm_exact shader embedded");
  }
};

QTEST_GUILESS_MAIN(VulkanSpirvTest)
#include "test_vulkan_spirv.moc"
