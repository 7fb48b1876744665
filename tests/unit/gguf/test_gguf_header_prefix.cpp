// gguf::File::fromHeader: the first bytes of a file (what a Range request fetched before a
// download) parse into the same metadata and tensor table as the whole file, tensor extents are
// checked against the whole file's size, and a prefix that ends inside the header asks for more
// bytes (HeaderIncomplete) instead of calling the file malformed.

#include <QTemporaryDir>
#include <QtTest>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/synthetic_model.h"

using namespace shoal;

namespace {

std::vector<uint8_t> smallModelBytes(const std::filesystem::path& dir) {
  model::SyntheticModelSpec s;
  s.nLayer = 2;
  s.nEmbd = 256;
  s.nHead = 4;
  s.nHeadKv = 2;
  s.nFf = 512;
  s.nVocab = 300;
  const auto path = dir / "m.gguf";
  model::writeSyntheticModel(s, path);
  const gguf::File f = gguf::File::open(path);
  std::vector<uint8_t> bytes(f.fileSize());
  std::FILE* in = std::fopen(path.c_str(), "rb");
  const size_t got = std::fread(bytes.data(), 1, bytes.size(), in);
  std::fclose(in);
  bytes.resize(got);
  return bytes;
}

// Where the tensor data starts: every header byte lies before it.
size_t dataStart(const std::vector<uint8_t>& bytes) {
  const gguf::File f = gguf::File::fromBuffer(bytes);
  size_t first = bytes.size();
  for (const auto& t : f.tensors()) first = std::min(first, size_t(t.data - bytes.data()));
  return first;
}

}  // namespace

class GgufHeaderPrefixTest : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    m_bytes = smallModelBytes(m_dir.path().toStdString());
  }

  void aPrefixReadsTheSameMetadataAndTensorsAsTheWholeFile() {
    const gguf::File whole = gguf::File::fromBuffer(m_bytes);
    const size_t n = dataStart(m_bytes);
    const gguf::File header = gguf::File::fromHeader(std::span(m_bytes.data(), n), m_bytes.size());
    QCOMPARE(header.fileSize(), m_bytes.size());
    QCOMPARE(header.metadata().size(), whole.metadata().size());
    QCOMPARE(header.getInt("llama.block_count"), whole.getInt("llama.block_count"));
    QCOMPARE(header.tensors().size(), whole.tensors().size());
    for (size_t i = 0; i < whole.tensors().size(); ++i) {
      QCOMPARE(header.tensors()[i].name, whole.tensors()[i].name);
      QCOMPARE(header.tensors()[i].nbytes, whole.tensors()[i].nbytes);
      QCOMPARE(header.tensors()[i].offset, whole.tensors()[i].offset);
      QVERIFY(header.tensors()[i].data == nullptr);  // no weights were fetched
    }
  }

  void aPrefixEndingInsideTheHeaderAsksForMore() {
    const size_t n = dataStart(m_bytes);
    for (size_t cut : {size_t{0}, size_t{3}, size_t{24}, n / 2, n - 40}) {
      try {
        gguf::File::fromHeader(std::span(m_bytes.data(), cut), m_bytes.size());
        QFAIL(qPrintable(QString("a %1-byte prefix parsed").arg(cut)));
      } catch (const gguf::HeaderIncomplete& e) {
        QVERIFY(!std::string(e.what()).empty());
      }
    }
  }

  void tensorsBeyondTheDeclaredFileSizeAreMalformedNotIncomplete() {
    const size_t n = dataStart(m_bytes);
    try {
      gguf::File::fromHeader(std::span(m_bytes.data(), n), n + 16);
      QFAIL("tensors beyond the declared size were accepted");
    } catch (const gguf::HeaderIncomplete&) {
      QFAIL("reported as incomplete: more bytes cannot help");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("beyond end of file") != std::string::npos, e.what());
    }
  }

  void aWrongMagicIsMalformedNotIncomplete() {
    std::vector<uint8_t> bad(m_bytes.begin(), m_bytes.begin() + 64);
    bad[0] = 'X';
    try {
      gguf::File::fromHeader(bad, m_bytes.size());
      QFAIL("a wrong magic parsed");
    } catch (const gguf::HeaderIncomplete&) {
      QFAIL("reported as incomplete");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("not a GGUF file") != std::string::npos, e.what());
    }
  }

  void aPrefixLargerThanTheFileIsRefused() {
    QVERIFY_THROWS_EXCEPTION(Error, gguf::File::fromHeader(m_bytes, m_bytes.size() - 1));
  }

 private:
  QTemporaryDir m_dir;
  std::vector<uint8_t> m_bytes;
};

QTEST_GUILESS_MAIN(GgufHeaderPrefixTest)
#include "test_gguf_header_prefix.moc"
