// Where the programs look for the default model (engine/model/default_model.h): the order of the
// folders, the XDG variables, and the rule that only an executable inside its own build tree
// looks into the source tree's models/ — a copy elsewhere (an installed package) never does.

#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model/default_model.h"

using namespace shoal;

namespace {

using Dirs = std::vector<std::string>;

// Set in the child process a test starts from a copy of this executable: print what it finds.
constexpr const char* kPrintVariable = "SHOAL_TEST_PRINT_MODEL_DIRS";

const std::string kSourceModels = SHOAL_MODELS_DIR;  // the tests' and the engine's models/

// The variables default_model.cpp reads, restored after each test.
const char* const kVariables[] = {"SHOAL_MODEL", "SHOAL_MODELS_DIR", "XDG_DATA_HOME",
                                  "XDG_DATA_DIRS", "HOME"};

QString joined(const Dirs& dirs) {
  QStringList out;
  for (const std::string& d : dirs) out << QString::fromStdString(d);
  return out.join('\n');
}

}  // namespace

class TestDefaultModel : public QObject {
  Q_OBJECT

  QMap<QByteArray, QByteArray> m_saved;

 private slots:
  void init() {
    m_saved.clear();
    for (const char* v : kVariables) {
      if (qEnvironmentVariableIsSet(v)) m_saved[v] = qgetenv(v);
      qunsetenv(v);
    }
  }

  void cleanup() {
    for (const char* v : kVariables) qunsetenv(v);
    for (auto it = m_saved.begin(); it != m_saved.end(); ++it) qputenv(it.key(), it.value());
  }

  void thisTestRunsFromItsBuildTree() { QVERIFY(model::runsFromBuildTree()); }

  void everyVariableSetGivesTheDocumentedOrder() {
    qputenv("SHOAL_MODELS_DIR", "/m");
    qputenv("XDG_DATA_HOME", "/x");
    qputenv("XDG_DATA_DIRS", "/d1:/d2/");
    qputenv("HOME", "/h");
    const Dirs want{"/m",
                    kSourceModels,
                    "/x/shoal/models",
                    "/d1/shoal/models",
                    "/d2/shoal/models",
                    "/var/lib/shoal/models"};
    QCOMPARE(joined(model::defaultModelDirs()), joined(want));
  }

  void unsetVariablesFallBackToHomeAndTheSystemDataDirs() {
    qputenv("HOME", "/h");
    const Dirs want{kSourceModels, "/h/.local/share/shoal/models", "/usr/local/share/shoal/models",
                    "/usr/share/shoal/models", "/var/lib/shoal/models"};
    QCOMPARE(joined(model::defaultModelDirs()), joined(want));
  }

  // The XDG Base Directory spec: relative paths in these variables are invalid, ignored.
  void relativeXdgPathsAreIgnored() {
    qputenv("HOME", "/h");
    qputenv("XDG_DATA_HOME", "relative/data");
    qputenv("XDG_DATA_DIRS", "rel::/sys-data");
    const Dirs want{kSourceModels, "/h/.local/share/shoal/models", "/sys-data/shoal/models",
                    "/var/lib/shoal/models"};
    QCOMPARE(joined(model::defaultModelDirs()), joined(want));
  }

  void userModelsDirIsTheXdgDataHome() {
    qputenv("HOME", "/h");
    QCOMPARE(QString::fromStdString(model::userModelsDir()),
             QString("/h/.local/share/shoal/models"));
    qputenv("XDG_DATA_HOME", "/x");
    QCOMPARE(QString::fromStdString(model::userModelsDir()), QString("/x/shoal/models"));
    qunsetenv("XDG_DATA_HOME");
    qunsetenv("HOME");
    QVERIFY(model::userModelsDir().empty());
  }

  void theFirstFolderHoldingTheModelWins() {
    QTemporaryDir tmp;
    const QString data = tmp.filePath("data"), system = tmp.filePath("system");
    QVERIFY(QDir().mkpath(system + "/shoal/models"));
    QFile f(system + "/shoal/models/" + model::kDefaultModelFile);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.close();
    qputenv("XDG_DATA_HOME", data.toUtf8());
    qputenv("XDG_DATA_DIRS", system.toUtf8());
    qputenv("SHOAL_MODELS_DIR", tmp.filePath("empty").toUtf8());
    // The source tree's copy comes before the system one in a build tree (when setup fetched
    // it); either way it is never the user's empty folder.
    const QString want =
        QFile::exists(QString::fromStdString(kSourceModels) + '/' + model::kDefaultModelFile)
            ? QString::fromStdString(kSourceModels) + '/' + model::kDefaultModelFile
            : f.fileName();
    QCOMPARE(QString::fromStdString(model::defaultModelPath()), want);
    qputenv("SHOAL_MODEL", "/explicit.gguf");
    QCOMPARE(QString::fromStdString(model::defaultModelPath()), QString("/explicit.gguf"));
  }

  // What an installed package is: the same binary outside the build tree. It must not list the
  // source tree's models/ (nor use the model there), and finds the user's instead.
  void aCopyOutsideTheBuildTreeIgnoresTheSourceModels() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QString copy = tmp.filePath("test_default_model_copy");
    QVERIFY(QFile::copy(QCoreApplication::applicationFilePath(), copy));
    QVERIFY(QFile::setPermissions(copy, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner));
    const QString userModels = tmp.filePath("data/shoal/models");
    QVERIFY(QDir().mkpath(userModels));
    QFile model(userModels + '/' + model::kDefaultModelFile);
    QVERIFY(model.open(QIODevice::WriteOnly));
    model.close();

    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char* v : kVariables) env.remove(v);
    env.insert("HOME", tmp.filePath("home"));
    env.insert("XDG_DATA_HOME", tmp.filePath("data"));
    env.insert(kPrintVariable, "1");
    QProcess p;
    p.setProcessEnvironment(env);
    p.setWorkingDirectory(tmp.path());
    p.start(copy, {});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    const QStringList lines = QString::fromUtf8(p.readAllStandardOutput()).split('\n');
    QVERIFY2(lines.contains("build tree: no"), qPrintable(lines.join('\n')));
    QVERIFY2(!lines.contains("dir " + QString::fromStdString(kSourceModels)),
             qPrintable(lines.join('\n')));
    QVERIFY2(lines.contains("dir " + userModels), qPrintable(lines.join('\n')));
    QVERIFY2(lines.contains("path " + model.fileName()), qPrintable(lines.join('\n')));
  }
};

int main(int argc, char** argv) {
  if (std::getenv(kPrintVariable)) {
    std::printf("build tree: %s\n", model::runsFromBuildTree() ? "yes" : "no");
    for (const std::string& d : model::defaultModelDirs()) std::printf("dir %s\n", d.c_str());
    std::printf("path %s\n", model::defaultModelPath().c_str());
    return 0;
  }
  QCoreApplication app(argc, argv);
  TestDefaultModel t;
  return QTest::qExec(&t, argc, argv);
}

#include "test_default_model.moc"
