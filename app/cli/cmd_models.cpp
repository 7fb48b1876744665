// shoal-cli models: find, download and manage GGUF models from the Hugging Face Hub (lan/hub).
//
//   shoal-cli models search TEXT [--sort downloads|recent] [--limit N] [--json]
//   shoal-cli models files REPO [--revision R] [--no-fit] [--json]
//            every model of the repository (split parts as one) with its quantization, size and
//            whether it runs on this computer, from its GGUF header fetched by a Range request
//   shoal-cli models pull REPO FILE [--dir D] [--revision R] [--json]
//            FILE is a name `files` prints (a split model by its first part); resumable: Ctrl-C
//            keeps the partial download and the same command continues it
//   shoal-cli models list [--dir D] [--no-fit] [--json]
//            the GGUF files of the models folder, with whether each runs on this computer
//   shoal-cli models rm NAME [--dir D]           removes a model (every part of a split model)
//
// --dir defaults to $SHOAL_MODELS_DIR when set, else the user's models folder,
// $XDG_DATA_HOME/shoal/models or ~/.local/share/shoal/models (model::userModelsDir), where the
// app and the default model's fetch script put models too. HF_ENDPOINT (a mirror) and HF_TOKEN
// (gated models) are read from the environment, and the system proxy (http_proxy, https_proxy,
// no_proxy) by libcurl. Exit codes: 0 done, 1 runtime failure, 2 bad input or a Hub error (one line
// on stderr), 130 after Ctrl-C stopped a pull.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/net_helper.h"
#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/default_model.h"
#include "engine/plan/fit.h"
#include "lan/hub/header_fit.h"
#include "lan/hub/hub_client.h"
#include "lan/node/device_profile.h"
#include "lan/node/node_service.h"

namespace shoal::cli {
namespace {

namespace fs = std::filesystem;
namespace hub = lan::hub;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct ModelsOptions {
  std::string text;
  std::string sort = "downloads";
  int limit = 20;
  std::string repo;
  std::string revision = "main";
  std::string file;
  std::string dir;
  std::string name;
  bool json = false;
  bool noFit = false;
};

fs::path modelsDirOf(const ModelsOptions& o) {
  if (!o.dir.empty()) return o.dir;
  // The folder the user named for every program (defaultModelDirs searches it first).
  if (const char* env = std::getenv("SHOAL_MODELS_DIR"); env && *env) return env;
  const std::string user = model::userModelsDir();
  if (user.empty()) throw CliExit{2, "no --dir and neither XDG_DATA_HOME nor HOME is set"};
  return user;
}

// A Hub error is the user's to act on (a name, a token, the network): one line, exit 2.
[[noreturn]] void hubExit(const hub::HubError& e) { throw CliExit{2, e.what()}; }

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", bytes / (1024.0 * 1024.0));
  return buf;
}

// ---- search -------------------------------------------------------------------------------

void runSearch(const ModelsOptions& o) {
  if (o.sort != "downloads" && o.sort != "recent") {
    throw CliExit{2, "--sort must be downloads or recent, not '" + o.sort + "'"};
  }
  if (o.limit < 1 || o.limit > 1000) throw CliExit{2, "--limit must be 1..1000"};
  std::vector<hub::RepoSummary> found;
  try {
    found = hub::HubClient::fromEnvironment().search(
        o.text, o.sort == "recent" ? hub::SearchSort::Recent : hub::SearchSort::Downloads, o.limit);
  } catch (const hub::HubError& e) {
    hubExit(e);
  }
  if (o.json) {
    json out = json::array();
    for (const auto& r : found) {
      out.push_back({{"id", r.id},
                     {"downloads", r.downloads},
                     {"likes", r.likes},
                     {"lastModified", r.lastModified},
                     {"gated", r.gated}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (found.empty()) std::printf("no GGUF repository matches '%s'\n", o.text.c_str());
  for (const auto& r : found) {
    std::printf("%-56s %10lld downloads %6lld likes  %.10s%s\n", r.id.c_str(),
                static_cast<long long>(r.downloads), static_cast<long long>(r.likes),
                r.lastModified.c_str(), r.gated ? "  (gated: needs HF_TOKEN)" : "");
  }
}

// ---- files --------------------------------------------------------------------------------

struct FitResult {
  std::optional<plan::FitEstimate> estimate;
  std::string error;  // why there is no estimate
};

FitResult fitOf(const hub::HubClient& client, const std::string& repo, const hub::ModelFile& m,
                const std::string& revision, const plan::Pool& pool) {
  const hub::HeaderFit fit =
      hub::estimateHeaderFit(client, repo, m, {pool}, hub::kFitContextTokens, revision);
  FitResult out;
  if (fit.error.empty()) {
    out.estimate = fit.estimates.at(0);
  } else {
    out.error = fit.error;
  }
  return out;
}

std::string fitText(const FitResult& f) {
  if (!f.estimate) return "fit unknown: " + f.error;
  if (!f.estimate->runs) return "does not run: " + f.estimate->reason;
  char buf[64];
  std::snprintf(buf, sizeof buf, "runs, ~%.0f tok/s", f.estimate->tokensPerS);
  return buf;
}

json fitJson(const FitResult& f) {
  if (!f.estimate) return {{"error", f.error}};
  const plan::FitEstimate& e = *f.estimate;
  return {{"runs", e.runs},
          {"reason", e.reason},
          {"architecture", e.architecture},
          {"contextTokens", e.contextTokens},
          {"weightBytes", e.weightBytes},
          {"kvCacheBytes", e.kvCacheBytes},
          {"availableBytes", e.availableBytes},
          {"missingBytes", e.missingBytes},
          {"tokensPerS", e.tokensPerS}};
}

void runFiles(const ModelsOptions& o) {
  const hub::HubClient client = hub::HubClient::fromEnvironment();
  std::vector<hub::ModelFile> models;
  try {
    models = client.listModels(o.repo, o.revision);
  } catch (const hub::HubError& e) {
    hubExit(e);
  }
  std::optional<plan::Pool> pool;
  // This computer, with the profile shoal-node measured (or measuring it once, as the node would).
  if (!o.noFit && !models.empty()) pool = lan::thisComputerPool(lan::defaultConfigDir());
  json out = json::array();
  if (!o.json && models.empty()) std::printf("'%s' has no GGUF model\n", o.repo.c_str());
  for (const hub::ModelFile& m : models) {
    FitResult fit;
    if (pool && m.complete) fit = fitOf(client, o.repo, m, o.revision, *pool);
    if (pool && !m.complete) fit.error = "parts are missing from the repository";
    if (o.json) {
      json parts = json::array();
      for (const auto& p : m.parts) {
        parts.push_back({{"path", p.path}, {"size", p.size}, {"sha256", p.sha256}});
      }
      json entry = {{"name", m.name},
                    {"quantization", m.quantization},
                    {"bytes", m.totalBytes},
                    {"parts", parts},
                    {"complete", m.complete}};
      if (pool) entry["fit"] = fitJson(fit);
      out.push_back(std::move(entry));
      continue;
    }
    std::string partsText = m.parts.size() > 1 || !m.complete
                                ? std::to_string(m.parts.size()) + " parts"
                                : std::string("1 file");
    if (!m.complete) {
      partsText = std::to_string(m.parts.size()) + " of " +
                  std::to_string(hub::parseSplitName(m.name).count) + " parts";
    }
    std::printf("%-60s %-8s %10s MiB  %-18s%s%s\n", m.name.c_str(),
                m.quantization.empty() ? "-" : m.quantization.c_str(),
                mib(static_cast<double>(m.totalBytes)).c_str(), partsText.c_str(), pool ? "  " : "",
                pool ? fitText(fit).c_str() : "");
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
}

// ---- pull ---------------------------------------------------------------------------------

// Ctrl-C during a pull: the download stops at the next progress callback and keeps its part.
std::atomic<bool>* g_stop = nullptr;
extern "C" void onInterrupt(int) {
  if (g_stop) g_stop->store(true);
}
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler stores into it");

std::string clockText(double seconds) {
  if (!(seconds >= 0) || seconds > 359999) return "--:--";
  const auto s = static_cast<long>(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

// A progress bar on a terminal (one \r line), otherwise a line every few seconds (logs, CI).
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool quiet) : m_quiet(quiet), m_tty(isatty(fileno(stderr)) == 1) {}

  void operator()(const hub::DownloadProgress& p) {
    if (m_quiet) return;
    const auto now = Clock::now();
    if (!m_tty && now - m_last < std::chrono::seconds(3)) return;
    m_last = now;
    const double total = static_cast<double>(p.totalBytes);
    const double done = static_cast<double>(p.doneBytes);
    const double percent = total > 0 ? 100.0 * done / total : 0;
    const double eta = p.bytesPerS > 0 ? (total - done) / p.bytesPerS : -1;
    char line[200];
    std::snprintf(line, sizeof line, "%5.1f%%  %s / %s MiB  %s MiB/s  ETA %s%s", percent,
                  mib(done).c_str(), mib(total).c_str(), mib(p.bytesPerS).c_str(),
                  clockText(eta).c_str(), p.verifying ? "  verifying" : "");
    std::fprintf(stderr, m_tty ? "\r%-78s" : "%s\n", line);
    m_open = m_tty;
  }
  void finish() {
    if (m_open) std::fprintf(stderr, "\n");
    m_open = false;
  }

 private:
  bool m_quiet;
  bool m_tty;
  bool m_open = false;
  Clock::time_point m_last{};
};

void runPull(const ModelsOptions& o) {
  const fs::path dir = modelsDirOf(o);
  const hub::HubClient client = hub::HubClient::fromEnvironment();
  hub::ModelFile model;
  bool found = false;
  try {
    for (const hub::ModelFile& m : client.listModels(o.repo, o.revision)) {
      if (m.name == o.file || (m.parts.size() == 1 && m.parts[0].path == o.file)) {
        model = m;
        found = true;
      }
    }
  } catch (const hub::HubError& e) {
    hubExit(e);
  }
  if (!found) {
    throw CliExit{2, "'" + o.repo + "' has no model '" + o.file +
                         "' (see: shoal-cli models files " + o.repo + ")"};
  }
  hub::DownloadControl control;
  g_stop = &control.stop;
  struct Restore {
    void (*previous)(int);
    ~Restore() {
      std::signal(SIGINT, previous);
      g_stop = nullptr;
    }
  } restore{std::signal(SIGINT, onInterrupt)};
  ProgressPrinter printer(o.json);
  fs::path path;
  try {
    path = client.download(
        o.repo, model, dir, [&](const hub::DownloadProgress& p) { printer(p); }, &control,
        o.revision);
  } catch (const hub::HubError& e) {
    printer.finish();
    if (e.kind() == hub::HubError::Kind::Cancelled) {
      std::fprintf(stderr, "shoal-cli: stopped; run the same command again to resume\n");
      throw CliExit{130, ""};
    }
    hubExit(e);
  }
  printer.finish();
  const bool verified = std::all_of(model.parts.begin(), model.parts.end(),
                                    [](const hub::RepoFile& f) { return !f.sha256.empty(); });
  if (o.json) {
    std::printf("%s\n", json{{"path", path.string()},
                             {"bytes", model.totalBytes},
                             {"parts", model.parts.size()},
                             {"sha256_verified", verified}}
                            .dump()
                            .c_str());
  } else {
    std::printf("%s (%s MiB%s)\n", path.string().c_str(),
                mib(static_cast<double>(model.totalBytes)).c_str(),
                verified ? ", SHA-256 verified" : ", no published SHA-256 to verify");
  }
}

// ---- list / rm ----------------------------------------------------------------------------

// The files of one local model: a single file, or every part of a split (by the first part).
struct LocalModel {
  std::string name;  // the file name; a split model's first part
  std::vector<fs::path> files;
  uint64_t bytes = 0;
  int expectedParts = 1;
};

std::vector<LocalModel> localModels(const fs::path& dir) {
  std::map<std::string, LocalModel> byName;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (name.size() < 6 || name.front() == '.' ||
        (name.substr(name.size() - 5) != ".gguf" && name.substr(name.size() - 5) != ".GGUF")) {
      continue;
    }
    const hub::SplitName split = hub::parseSplitName(name);
    std::string key = name;
    if (split.part > 0) {
      char suffix[40];
      std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", 1, split.count);
      key = split.base + suffix;
    }
    LocalModel& m = byName[key];
    m.name = key;
    m.expectedParts = split.part > 0 ? split.count : 1;
    m.files.push_back(entry.path());
    m.bytes += static_cast<uint64_t>(entry.file_size(ec));
  }
  std::vector<LocalModel> out;
  for (auto& [key, m] : byName) {
    std::sort(m.files.begin(), m.files.end());
    out.push_back(std::move(m));
  }
  return out;
}

// The tensor type holding most of the weight bytes ("q4_K"): the file's quantization when its
// name does not say.
std::string dominantType(const gguf::File& f) {
  std::map<std::string, uint64_t> bytes;
  for (const auto& t : f.tensors()) bytes[gguf::typeName(t.type)] += t.nbytes;
  std::string best;
  uint64_t most = 0;
  for (const auto& [type, n] : bytes) {
    if (n > most) {
      most = n;
      best = type;
    }
  }
  return best;
}

void runList(const ModelsOptions& o) {
  const fs::path dir = modelsDirOf(o);
  json out = json::array();
  const auto models = localModels(dir);
  if (!o.json && models.empty()) std::printf("no model in %s\n", dir.string().c_str());
  // The same verdict `files` gives before a download, now from the whole header on disk.
  std::optional<plan::Pool> pool;
  if (!o.noFit && !models.empty()) pool = lan::thisComputerPool(lan::defaultConfigDir());
  for (const LocalModel& m : models) {
    std::string architecture, quantization = hub::quantizationFromName(m.name), error;
    const bool complete = static_cast<int>(m.files.size()) == m.expectedParts;
    FitResult fit;
    try {
      const gguf::File f = gguf::File::open(dir / m.name);
      architecture = f.getStringOr("general.architecture", "");
      if (quantization.empty()) quantization = dominantType(f);
      if (pool) fit.estimate = plan::estimateFit(f, *pool, hub::kFitContextTokens);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!complete && error.empty()) {
      error = std::to_string(m.files.size()) + " of " + std::to_string(m.expectedParts) +
              " parts present";
    }
    if (o.json) {
      json entry = {{"name", m.name},
                    {"path", (dir / m.name).string()},
                    {"bytes", m.bytes},
                    {"parts", m.files.size()},
                    {"architecture", architecture},
                    {"quantization", quantization}};
      if (!error.empty()) entry["error"] = error;
      if (fit.estimate) entry["fit"] = fitJson(fit);
      out.push_back(std::move(entry));
      continue;
    }
    std::printf("%-60s %10s MiB  %-12s %-8s%s%s%s%s\n", m.name.c_str(),
                mib(static_cast<double>(m.bytes)).c_str(),
                architecture.empty() ? "-" : architecture.c_str(),
                quantization.empty() ? "-" : quantization.c_str(), error.empty() ? "" : "  ",
                error.c_str(), fit.estimate ? "  " : "", fit.estimate ? fitText(fit).c_str() : "");
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
}

void runRm(const ModelsOptions& o) {
  const fs::path dir = modelsDirOf(o);
  if (o.name.empty() || o.name.find('/') != std::string::npos ||
      o.name.find('\\') != std::string::npos || o.name.front() == '.') {
    throw CliExit{2, "'" + o.name + "' is not a model's file name (see: shoal-cli models list)"};
  }
  const hub::SplitName split = hub::parseSplitName(o.name);
  for (const LocalModel& m : localModels(dir)) {
    const bool match =
        m.name == o.name || std::any_of(m.files.begin(), m.files.end(), [&](const fs::path& p) {
          return split.part > 0 && p.filename() == o.name;
        });
    if (!match) continue;
    for (const fs::path& p : m.files) {
      std::error_code ec;
      if (!fs::remove(p, ec) || ec) {
        throw CliExit{1, "cannot remove " + p.string() + (ec ? ": " + ec.message() : "")};
      }
    }
    std::printf("removed %s (%zu file%s, %s MiB)\n", m.name.c_str(), m.files.size(),
                m.files.size() == 1 ? "" : "s", mib(static_cast<double>(m.bytes)).c_str());
    return;
  }
  throw CliExit{2, "no model '" + o.name + "' in " + dir.string()};
}

}  // namespace

void registerModelsCommand(CLI::App& app) {
  auto o = std::make_shared<ModelsOptions>();
  CLI::App* models = app.add_subcommand("models", netCommandHelp("models"));
  models->require_subcommand(1);

  CLI::App* search = models->add_subcommand("search", "GGUF repositories matching TEXT");
  search->add_option("text", o->text, "words of the repository name")->required();
  search->add_option("--sort", o->sort, "downloads (default) or recent");
  search->add_option("--limit", o->limit, "at most this many results (20)");
  search->add_flag("--json", o->json, "print JSON");
  search->callback([o] { runSearch(*o); });

  CLI::App* files = models->add_subcommand("files", "the models of a repository, with their fit");
  files->add_option("repo", o->repo, "owner/name")->required();
  files->add_option("--revision", o->revision, "branch, tag or commit (main)");
  files->add_flag("--no-fit", o->noFit, "do not fetch headers to estimate the fit");
  files->add_flag("--json", o->json, "print JSON");
  files->callback([o] { runFiles(*o); });

  CLI::App* pull = models->add_subcommand("pull", "download a model (resumable)");
  pull->add_option("repo", o->repo, "owner/name")->required();
  pull->add_option("file", o->file, "the model's name as `files` prints it")->required();
  pull->add_option("--dir", o->dir, "models folder (default: the user's)");
  pull->add_option("--revision", o->revision, "branch, tag or commit (main)");
  pull->add_flag("--json", o->json, "print one JSON object at the end");
  pull->callback([o] { runPull(*o); });

  CLI::App* list = models->add_subcommand("list", "the models in the models folder");
  list->add_option("--dir", o->dir, "models folder (default: the user's)");
  list->add_flag("--json", o->json, "print JSON");
  list->add_flag("--no-fit", o->noFit, "do not estimate whether each model runs here");
  list->callback([o] { runList(*o); });

  CLI::App* rm = models->add_subcommand("rm", "remove a model from the models folder");
  rm->add_option("name", o->name, "the model's file name (a split model: any part)")->required();
  rm->add_option("--dir", o->dir, "models folder (default: the user's)");
  rm->callback([o] { runRm(*o); });
}

}  // namespace shoal::cli
