// The Hub's replies are untrusted input: shapes are checked, sizes bounded, unsafe paths refused.

#include <QtTest>

#include "lan/hub/hub_parse.h"

using namespace shoal::lan::hub;

namespace {

HubError::Kind kindOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const HubError& e) {
    return e.kind();
  }
  return HubError::Kind::Local;  // "did not throw" (Local is never thrown by the parsers)
}

const std::string kSha(64, 'a');

}  // namespace

class TestHubParse : public QObject {
  Q_OBJECT

 private slots:
  void searchReplyIsRead() {
    const auto repos = parseSearchReply(
        "[{\"id\":\"a/"
        "b\",\"downloads\":12,\"likes\":3,\"lastModified\":\"2026-01-01T00:00:00.000Z\","
        "\"gated\":false},{\"id\":\"c/d\",\"gated\":\"manual\"}]");
    QCOMPARE(repos.size(), size_t{2});
    QCOMPARE(repos[0].id, std::string("a/b"));
    QCOMPARE(repos[0].downloads, int64_t{12});
    QCOMPARE(repos[0].likes, int64_t{3});
    QCOMPARE(repos[0].lastModified, std::string("2026-01-01T00:00:00.000Z"));
    QVERIFY(!repos[0].gated);
    QVERIFY(repos[1].gated);
    QCOMPARE(repos[1].downloads, int64_t{0});
  }

  void searchReplyWithWrongTypesIsABadReply() {
    QCOMPARE(kindOf([] { parseSearchReply("{}"); }), HubError::Kind::BadReply);
    QCOMPARE(kindOf([] { parseSearchReply("not json"); }), HubError::Kind::BadReply);
    QCOMPARE(kindOf([] { parseSearchReply("[{\"id\":5}]"); }), HubError::Kind::BadReply);
    QCOMPARE(kindOf([] { parseSearchReply("[{\"id\":\"a/b\",\"downloads\":\"many\"}]"); }),
             HubError::Kind::BadReply);
    QCOMPARE(kindOf([] { parseSearchReply("[{\"id\":\"../etc\"}]"); }), HubError::Kind::BadReply);
  }

  void aReplyNestedAMillionDeepIsABadReplyNotACrash() {
    // nlohmann parses and destroys its tree recursively: this would overflow the stack.
    const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
    QCOMPARE(kindOf([&] { parseSearchReply(deep); }), HubError::Kind::BadReply);
    QCOMPARE(kindOf([&] { parseTreeReply(deep); }), HubError::Kind::BadReply);
  }

  void treeReplyReadsLfsHashesAndSkipsDirectories() {
    const auto files = parseTreeReply(
        "[{\"type\":\"directory\",\"path\":\"sub\",\"oid\":\"x\",\"size\":0},"
        "{\"type\":\"file\",\"path\":\"sub/m-Q4_0.gguf\",\"size\":134,\"oid\":\"x\","
        "\"lfs\":{\"oid\":\"" +
        kSha +
        "\",\"size\":123456,\"pointerSize\":134}},"
        "{\"type\":\"file\",\"path\":\"README.md\",\"size\":5,\"oid\":\"y\"}]");
    QCOMPARE(files.size(), size_t{2});
    QCOMPARE(files[0].path, std::string("sub/m-Q4_0.gguf"));
    QCOMPARE(files[0].size, uint64_t{123456});  // the LFS object's size, not the pointer's
    QCOMPARE(files[0].sha256, kSha);
    QCOMPARE(files[1].sha256, std::string());
  }

  void hostileTreePathsAreRefused() {
    for (const char* path : {"../evil.gguf", "/etc/passwd.gguf", "a/../../b.gguf", "a\\b.gguf",
                             ".partial/x.gguf.part", "a//b.gguf", ""}) {
      const std::string body =
          std::string("[{\"type\":\"file\",\"size\":1,\"path\":\"") + path + "\"}]";
      QCOMPARE(kindOf([&] { parseTreeReply(body); }), HubError::Kind::BadReply);
    }
  }

  void malformedSizesAndHashesAreRefused() {
    QCOMPARE(
        kindOf([] { parseTreeReply("[{\"type\":\"file\",\"path\":\"a.gguf\",\"size\":-1}]"); }),
        HubError::Kind::BadReply);
    QCOMPARE(
        kindOf([] { parseTreeReply("[{\"type\":\"file\",\"path\":\"a.gguf\",\"size\":\"1\"}]"); }),
        HubError::Kind::BadReply);
    QCOMPARE(
        kindOf([] { parseTreeReply("[{\"type\":\"file\",\"path\":\"a.gguf\",\"size\":1e30}]"); }),
        HubError::Kind::BadReply);
    QCOMPARE(
        kindOf([] {
          parseTreeReply(
              "[{\"type\":\"file\",\"path\":\"a.gguf\",\"size\":1,\"lfs\":{\"oid\":\"xyz\"}}]");
        }),
        HubError::Kind::BadReply);
    QCOMPARE(kindOf([] { parseTreeReply("[{\"type\":\"file\",\"path\":\"a.gguf\"}]"); }),
             HubError::Kind::BadReply);
  }

  void repoIdsAreChecked() {
    QVERIFY(isValidRepoId("bartowski/Qwen2.5-7B-Instruct-GGUF"));
    QVERIFY(!isValidRepoId("noslash"));
    QVERIFY(!isValidRepoId("a/b/c"));
    QVERIFY(!isValidRepoId("../x"));
    QVERIFY(!isValidRepoId("a/b?x=1"));
  }
};

QTEST_APPLESS_MAIN(TestHubParse)
#include "test_hub_parse.moc"
