// The Hub client against tests/hub/fake_hub.py on 127.0.0.1 (and 127.0.0.2 as a "CDN"): search,
// file lists, resumable and verified downloads, gated repos, HF_ENDPOINT, the token's scope.

#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>

#include "lan/hub/hub_client.h"
#include "tests/hub/fake_hub_process.h"

using namespace shoal::lan::hub;
using shoal::testing::FakeHubProcess;
using shoal::testing::sha256Of;
using shoal::testing::writeBytesFile;
namespace fs = std::filesystem;

namespace {

QJsonObject repo(const QString& id, int downloads, const QString& lastModified,
                 const QJsonArray& files, bool gated = false) {
  return QJsonObject{{"id", id},       {"downloads", downloads},
                     {"likes", 1},     {"lastModified", lastModified},
                     {"gated", gated}, {"files", files}};
}

QJsonObject sourceFile(const QString& path, const QString& source) {
  return QJsonObject{{"path", path}, {"source", source}};
}

HubError::Kind kindOf(const std::function<void()>& f, QString* message = nullptr) {
  try {
    f();
  } catch (const HubError& e) {
    if (message) *message = QString::fromStdString(e.what());
    return e.kind();
  }
  QTest::qFail("no HubError was thrown", __FILE__, __LINE__);
  return HubError::Kind::Local;
}

bool hasRequest(const std::vector<QJsonObject>& log, const QString& pathPart,
                const QString& range) {
  for (const QJsonObject& r : log) {
    if (r["method"].toString() == "GET" && r["path"].toString().contains(pathPart) &&
        r["range"].toString() == range) {
      return true;
    }
  }
  return false;
}

}  // namespace

class TestHubClient : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir m_tmp;
  QString m_small;  // 300 000 bytes
  QString m_part1;  // 70 000
  QString m_part2;  // 50 000
  QString m_big;    // 600 000
  std::unique_ptr<FakeHubProcess> m_hub;

  QString models() const { return m_tmp.path() + "/models"; }

  // A server with the repos every test uses, plus `extra` keys in its config.
  void startHub(const QJsonObject& extra = {}) {
    QJsonArray repos{
        repo("acme/Tiny-GGUF", 5, "2026-03-01T00:00:00.000Z",
             {sourceFile("tiny-Q4_1.gguf", m_small),
              QJsonObject{{"path", "README.md"}, {"text", "a model card"}}}),
        repo("acme/Popular-GGUF", 500, "2026-01-01T00:00:00.000Z",
             {sourceFile("popular-Q8_0.gguf", m_small)}),
        repo("acme/Gated-GGUF", 50, "2026-02-01T00:00:00.000Z",
             {sourceFile("gated-Q4_0.gguf", m_small)}, true),
        repo("other/Not-Quantized", 9999, "2026-04-01T00:00:00.000Z",
             {QJsonObject{{"path", "model.safetensors"}, {"source", m_small}}}),
        repo("acme/Split-GGUF", 7, "2025-12-01T00:00:00.000Z",
             {sourceFile("split-Q8_0-00002-of-00002.gguf", m_part2),
              sourceFile("split-Q8_0-00001-of-00002.gguf", m_part1),
              sourceFile("single-Q4_0.gguf", m_small)}),
        repo("acme/Big-GGUF", 1, "2025-01-01T00:00:00.000Z", {sourceFile("big-F16.gguf", m_big)}),
        repo("acme/Wrong-Hash-GGUF", 1, "2025-01-01T00:00:00.000Z",
             {QJsonObject{
                 {"path", "bad-Q4_0.gguf"}, {"source", m_small}, {"sha256", QString(64, 'e')}}}),
        repo("evil/Escape-GGUF", 1, "2025-01-01T00:00:00.000Z",
             {sourceFile("../../escaped-Q4_0.gguf", m_small)}),
    };
    QJsonObject config{{"repos", repos}, {"token", "hf_test_token"}};
    for (auto it = extra.begin(); it != extra.end(); ++it) config[it.key()] = it.value();
    m_hub = std::make_unique<FakeHubProcess>();
    QString error;
    QVERIFY2(m_hub->start(m_tmp.path(), config, &error), qPrintable(error));
  }

  HubClient client(const std::string& token = "") const {
    HubOptions o;
    o.endpoint = m_hub->endpoint().toStdString();
    o.token = token;
    o.stallTimeoutS = 20;
    return HubClient(o);
  }

  ModelFile modelOf(const HubClient& c, const std::string& repoId) {
    const auto models = c.listModels(repoId);
    if (models.empty()) throw std::runtime_error("no model in " + repoId);
    return models.front();
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_tmp.isValid());
    m_small = m_tmp.path() + "/small.bin";
    m_part1 = m_tmp.path() + "/part1.bin";
    m_part2 = m_tmp.path() + "/part2.bin";
    m_big = m_tmp.path() + "/big.bin";
    QVERIFY(writeBytesFile(m_small, 300000, 1));
    QVERIFY(writeBytesFile(m_part1, 70000, 2));
    QVERIFY(writeBytesFile(m_part2, 50000, 3));
    QVERIFY(writeBytesFile(m_big, 600000, 4));
  }

  void init() { fs::remove_all(models().toStdString()); }

  void cleanup() { m_hub.reset(); }

  void searchSortsByDownloadsOrByRecentAndFilters() {
    startHub();
    const HubClient c = client();
    const auto byDownloads = c.search("GGUF", SearchSort::Downloads, 10);
    QCOMPARE(byDownloads.size(), size_t{7});  // not "Not-Quantized": it has no .gguf file
    QCOMPARE(byDownloads[0].id, std::string("acme/Popular-GGUF"));
    QCOMPARE(byDownloads[0].downloads, int64_t{500});
    QCOMPARE(byDownloads[1].id, std::string("acme/Gated-GGUF"));
    QVERIFY(byDownloads[1].gated);
    QVERIFY(!byDownloads[0].gated);
    const auto recent = c.search("gguf", SearchSort::Recent, 2);
    QCOMPARE(recent.size(), size_t{2});
    QCOMPARE(recent[0].id, std::string("acme/Tiny-GGUF"));
    QCOMPARE(recent[1].id, std::string("acme/Gated-GGUF"));
    const auto tiny = c.search("tiny", SearchSort::Downloads, 10);
    QCOMPARE(tiny.size(), size_t{1});
    QCOMPARE(tiny[0].id, std::string("acme/Tiny-GGUF"));
    // What was asked: the documented query parameters.
    const auto log = m_hub->requests();
    QVERIFY(!log.empty());
    QVERIFY(log.back()["query"].toString().contains("filter=gguf"));
    QVERIFY(log.back()["query"].toString().contains("sort=downloads"));
    QVERIFY(log[1]["query"].toString().contains("sort=lastModified"));
  }

  void fileListGroupsSplitParts() {
    startHub();
    const auto models = client().listModels("acme/Split-GGUF");
    QCOMPARE(models.size(), size_t{2});
    QCOMPARE(models[0].name, std::string("single-Q4_0.gguf"));
    QCOMPARE(models[0].quantization, std::string("Q4_0"));
    QCOMPARE(models[0].totalBytes, uint64_t{300000});
    QCOMPARE(QString::fromStdString(models[0].parts[0].sha256), sha256Of(m_small));
    const ModelFile& split = models[1];
    QCOMPARE(split.name, std::string("split-Q8_0-00001-of-00002.gguf"));
    QCOMPARE(split.quantization, std::string("Q8_0"));
    QCOMPARE(split.parts.size(), size_t{2});
    QCOMPARE(split.parts[1].path, std::string("split-Q8_0-00002-of-00002.gguf"));
    QCOMPARE(split.totalBytes, uint64_t{120000});
    QVERIFY(split.complete);
  }

  void splitModelDownloadsEveryPart() {
    startHub();
    const HubClient c = client();
    const auto listed = c.listModels("acme/Split-GGUF");
    std::vector<DownloadProgress> reports;
    const fs::path first = c.download("acme/Split-GGUF", listed[1], models().toStdString(),
                                      [&](const DownloadProgress& p) { reports.push_back(p); });
    QCOMPARE(QString::fromStdString(first.filename().string()),
             QString("split-Q8_0-00001-of-00002.gguf"));
    QCOMPARE(sha256Of(QString::fromStdString(first.string())), sha256Of(m_part1));
    QCOMPARE(sha256Of(models() + "/split-Q8_0-00002-of-00002.gguf"), sha256Of(m_part2));
    QVERIFY(!reports.empty());
    QCOMPARE(reports.back().doneBytes, uint64_t{120000});
    QCOMPARE(reports.back().totalBytes, uint64_t{120000});
    QCOMPARE(reports.back().parts, 2);
    QCOMPARE(reports.back().part, 1);
    for (size_t i = 1; i < reports.size(); ++i) {
      QVERIFY(reports[i].doneBytes >= reports[i - 1].doneBytes);
    }
  }

  void aDifferentFileOfTheSameNameIsNeverReplaced() {
    startHub();
    const HubClient c = client();
    const auto listed = c.listModels("acme/Split-GGUF");
    fs::create_directories(models().toStdString());
    const QString mine = models() + "/split-Q8_0-00001-of-00002.gguf";
    QVERIFY(writeBytesFile(mine, 1234, 99));
    const QString before = sha256Of(mine);
    QString message;
    QCOMPARE(kindOf([&] { c.download("acme/Split-GGUF", listed[1], models().toStdString(), {}); },
                    &message),
             HubError::Kind::Local);
    QVERIFY2(message.contains("already in the models folder"), qPrintable(message));
    QCOMPARE(sha256Of(mine), before);
  }

  void fetchPrefixAsksForARange() {
    startHub();
    const HubClient c = client();
    const ModelFile m = modelOf(c, "acme/Tiny-GGUF");
    const auto prefix = c.fetchPrefix("acme/Tiny-GGUF", m.parts[0], 1000);
    QCOMPARE(prefix.size(), size_t{1000});
    QFile f(m_small);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray head = f.read(1000);
    QVERIFY(std::equal(prefix.begin(), prefix.end(), head.begin(), head.end(),
                       [](uint8_t a, char b) { return a == static_cast<uint8_t>(b); }));
    QVERIFY(hasRequest(m_hub->requests(), "/resolve/main/tiny-Q4_1.gguf", "bytes=0-999"));
  }

  void droppedTransferResumesWithARange() {
    startHub({{"dropAfterBytes", 100000}});
    const HubClient c = client();
    const ModelFile m = modelOf(c, "acme/Tiny-GGUF");
    QString message;
    QCOMPARE(kindOf([&] { c.download("acme/Tiny-GGUF", m, models().toStdString(), {}); }, &message),
             HubError::Kind::Network);
    QVERIFY2(message.contains("resume"), qPrintable(message));
    const QString part = models() + "/.partial/tiny-Q4_1.gguf.part";
    QCOMPARE(QFileInfo(part).size(), qint64{100000});
    QVERIFY(QFileInfo::exists(part + ".json"));
    QVERIFY(!QFileInfo::exists(models() + "/tiny-Q4_1.gguf"));

    const fs::path done = c.download("acme/Tiny-GGUF", m, models().toStdString(), {});
    QVERIFY(hasRequest(m_hub->requests(), "/resolve/main/tiny-Q4_1.gguf", "bytes=100000-"));
    QCOMPARE(sha256Of(QString::fromStdString(done.string())), sha256Of(m_small));
    QVERIFY(!QFileInfo::exists(part));
    QVERIFY(!QFileInfo::exists(part + ".json"));
  }

  void partialResumesAfterARestartOfBothSides() {
    // The first server drops the transfer; a new server process (another port) and a new client
    // continue from the partial file on disk.
    startHub({{"dropAfterBytes", 123456}});
    {
      const HubClient c = client();
      const ModelFile m = modelOf(c, "acme/Big-GGUF");
      QCOMPARE(kindOf([&] { c.download("acme/Big-GGUF", m, models().toStdString(), {}); }),
               HubError::Kind::Network);
    }
    startHub();
    const HubClient c = client();
    const ModelFile m = modelOf(c, "acme/Big-GGUF");
    const fs::path done = c.download("acme/Big-GGUF", m, models().toStdString(), {});
    QVERIFY(hasRequest(m_hub->requests(), "/resolve/main/big-F16.gguf", "bytes=123456-"));
    QCOMPARE(sha256Of(QString::fromStdString(done.string())), sha256Of(m_big));
  }

  void partialOfAnotherFileStartsAgainFromZero() {
    startHub();
    const HubClient c = client();
    const ModelFile m = modelOf(c, "acme/Tiny-GGUF");
    const QString partial = models() + "/.partial";
    QVERIFY(QDir().mkpath(partial));
    QVERIFY(writeBytesFile(partial + "/tiny-Q4_1.gguf.part", 1000, 9));
    QFile note(partial + "/tiny-Q4_1.gguf.part.json");
    QVERIFY(note.open(QIODevice::WriteOnly));
    note.write(
        "{\"repo\":\"acme/Tiny-GGUF\",\"revision\":\"main\",\"path\":\"tiny-Q4_1.gguf\","
        "\"size\":300000,\"sha256\":\"0000\"}");
    note.close();
    const fs::path done = c.download("acme/Tiny-GGUF", m, models().toStdString(), {});
    QCOMPARE(sha256Of(QString::fromStdString(done.string())), sha256Of(m_small));
    QVERIFY(hasRequest(m_hub->requests(), "/resolve/main/tiny-Q4_1.gguf", ""));
    QVERIFY(!hasRequest(m_hub->requests(), "/resolve/main/tiny-Q4_1.gguf", "bytes=1000-"));
  }

  void wrongPublishedHashIsRejectedAndKeptApart() {
    startHub();
    const HubClient c = client();
    const ModelFile m = modelOf(c, "acme/Wrong-Hash-GGUF");
    QString message;
    QCOMPARE(kindOf([&] { c.download("acme/Wrong-Hash-GGUF", m, models().toStdString(), {}); },
                    &message),
             HubError::Kind::Integrity);
    QVERIFY2(message.contains("SHA-256"), qPrintable(message));
    QVERIFY(QFileInfo::exists(models() + "/.partial/bad-Q4_0.gguf.rejected"));
    QVERIFY(!QFileInfo::exists(models() + "/.partial/bad-Q4_0.gguf.part"));
    QVERIFY(!QFileInfo::exists(models() + "/bad-Q4_0.gguf"));
    QCOMPARE(QDir(models()).entryList(QDir::Files).size(), 0);
  }

  void gatedRepoWithoutTokenIsExplained() {
    startHub();
    const HubClient c = client();
    const ModelFile m = modelOf(c, "acme/Gated-GGUF");  // the tree of a gated repo is public
    QString message;
    try {
      c.download("acme/Gated-GGUF", m, models().toStdString(), {});
      QFAIL("a gated file downloaded without a token");
    } catch (const HubError& e) {
      QCOMPARE(e.kind(), HubError::Kind::Unauthorized);
      QCOMPARE(e.httpStatus(), 401);
      message = e.what();
    }
    QVERIFY2(message.contains("HF_TOKEN"), qPrintable(message));
    QVERIFY2(message.contains("accept"), qPrintable(message));
    QVERIFY(!QFileInfo::exists(models() + "/gated-Q4_0.gguf"));

    const fs::path done =
        client("hf_test_token").download("acme/Gated-GGUF", m, models().toStdString(), {});
    QCOMPARE(sha256Of(QString::fromStdString(done.string())), sha256Of(m_small));
  }

  void unknownRepoOrFileIsNotFound() {
    startHub();
    const HubClient c = client();
    QCOMPARE(kindOf([&] { c.listModels("acme/Nothing-Here"); }), HubError::Kind::NotFound);
    ModelFile ghost;
    ghost.name = "ghost-Q4_0.gguf";
    ghost.parts = {RepoFile{"ghost-Q4_0.gguf", 10, ""}};
    ghost.totalBytes = 10;
    QString message;
    QCOMPARE(
        kindOf([&] { c.download("acme/Tiny-GGUF", ghost, models().toStdString(), {}); }, &message),
        HubError::Kind::NotFound);
    QVERIFY2(message.contains("ghost-Q4_0.gguf"), qPrintable(message));
  }

  void hfEndpointAndTokenComeFromTheEnvironment() {
    startHub();
    qputenv("HF_ENDPOINT", (m_hub->endpoint() + "/").toUtf8());
    qputenv("HF_TOKEN", "hf_test_token");
    const HubClient c = HubClient::fromEnvironment();
    qunsetenv("HF_ENDPOINT");
    qunsetenv("HF_TOKEN");
    QCOMPARE(QString::fromStdString(c.options().endpoint), m_hub->endpoint());
    QCOMPARE(c.options().token, std::string("hf_test_token"));
    QCOMPARE(c.search("tiny", SearchSort::Downloads, 5).size(), size_t{1});
    const ModelFile m = modelOf(c, "acme/Gated-GGUF");
    c.download("acme/Gated-GGUF", m, models().toStdString(), {});
    QVERIFY(QFileInfo::exists(models() + "/gated-Q4_0.gguf"));
    QVERIFY(!m_hub->requests().empty());

    const HubClient defaults = HubClient::fromEnvironment();
    QCOMPARE(defaults.options().endpoint, std::string("https://huggingface.co"));
    QVERIFY(defaults.options().token.empty());
  }

  void tokenGoesToTheEndpointButNotToTheRedirectHost() {
    startHub({{"redirectHost", "127.0.0.2"}});
    const HubClient c = client("hf_test_token");
    const ModelFile m = modelOf(c, "acme/Gated-GGUF");
    const fs::path done = c.download("acme/Gated-GGUF", m, models().toStdString(), {});
    QCOMPARE(sha256Of(QString::fromStdString(done.string())), sha256Of(m_small));
    bool endpointHadToken = false;
    bool cdnServed = false;
    for (const QJsonObject& r : m_hub->requests()) {
      const QString path = r["path"].toString();
      if (path.contains("/resolve/")) {
        QCOMPARE(r["host"].toString(), QString("127.0.0.1"));
        endpointHadToken = endpointHadToken || r["authorization"].toBool();
      }
      if (path.startsWith("/cdn/")) {
        cdnServed = true;
        QCOMPARE(r["host"].toString(), QString("127.0.0.2"));
        QVERIFY2(!r["authorization"].toBool(), "the token was sent to the redirect host");
      }
    }
    QVERIFY(endpointHadToken);
    QVERIFY(cdnServed);
  }

  void cancelKeepsThePartialAndALaterDownloadResumes() {
    startHub({{"throttleBytesPerS", 400000}});
    const HubClient c = client();
    const ModelFile m = modelOf(c, "acme/Big-GGUF");
    DownloadControl control;
    std::vector<DownloadProgress> reports;
    QCOMPARE(kindOf([&] {
               c.download(
                   "acme/Big-GGUF", m, models().toStdString(),
                   [&](const DownloadProgress& p) {
                     reports.push_back(p);
                     if (p.doneBytes >= 50000) control.cancel();
                   },
                   &control);
             }),
             HubError::Kind::Cancelled);
    QVERIFY(!reports.empty());
    QCOMPARE(reports.back().totalBytes, uint64_t{600000});
    const QString part = models() + "/.partial/big-F16.gguf.part";
    const qint64 kept = QFileInfo(part).size();
    QVERIFY2(kept >= 50000 && kept < 600000, qPrintable(QString::number(kept)));

    const fs::path done = c.download("acme/Big-GGUF", m, models().toStdString(), {});
    QVERIFY(hasRequest(m_hub->requests(), "/resolve/main/big-F16.gguf",
                       "bytes=" + QString::number(kept) + "-"));
    QCOMPARE(sha256Of(QString::fromStdString(done.string())), sha256Of(m_big));
  }

  void discardPartialRemovesWhatACancelLeft() {
    startHub({{"dropAfterBytes", 1000}});
    const HubClient c = client();
    const ModelFile m = modelOf(c, "acme/Tiny-GGUF");
    QCOMPARE(kindOf([&] { c.download("acme/Tiny-GGUF", m, models().toStdString(), {}); }),
             HubError::Kind::Network);
    QVERIFY(QFileInfo::exists(models() + "/.partial/tiny-Q4_1.gguf.part"));
    HubClient::discardPartial(m, models().toStdString());
    QVERIFY(!QFileInfo::exists(models() + "/.partial"));
  }

  void hostileTreePathIsRefused() {
    startHub();
    const HubClient c = client();
    QString message;
    QCOMPARE(kindOf([&] { c.listModels("evil/Escape-GGUF"); }, &message), HubError::Kind::BadReply);
    QVERIFY2(message.contains("escaped-Q4_0.gguf"), qPrintable(message));
    // A ModelFile made up elsewhere with such a path is refused before anything is written.
    ModelFile evil;
    evil.name = "../../escaped-Q4_0.gguf";
    evil.parts = {RepoFile{"../../escaped-Q4_0.gguf", 300000, ""}};
    evil.totalBytes = 300000;
    QCOMPARE(kindOf([&] { c.download("evil/Escape-GGUF", evil, models().toStdString(), {}); }),
             HubError::Kind::BadReply);
    QVERIFY(!QFileInfo::exists(m_tmp.path() + "/escaped-Q4_0.gguf"));
    QVERIFY(!QFileInfo::exists(models()));
  }
};

QTEST_GUILESS_MAIN(TestHubClient)
#include "test_hub_client.moc"
