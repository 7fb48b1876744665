// The checks on a request's head before its body is read (lan/api/request_guard.h): who may ask
// (key, Host, Origin on loopback) and which bodies are read at all.

#include <QtTest>

#include "lan/api/request_guard.h"

using namespace shoal::api;

namespace {

constexpr int kPort = 8080;

// A POST to the chat route from a local program, with a JSON body of 10 bytes.
RequestHead jsonPost() {
  return {
      "POST",
      "/v1/chat/completions",
      {{"Host", "127.0.0.1:8080"}, {"Content-Type", "application/json"}, {"Content-Length", "10"}}};
}

GuardPolicy loopback(std::string_view key = {}) {
  GuardPolicy p;
  p.loopbackBind = true;
  p.port = kPort;
  p.apiKey = key;
  return p;
}

// The status the guard answers, or 0 when the request may proceed.
int verdict(const RequestHead& head, const GuardPolicy& policy) {
  const std::optional<ApiError> e = checkRequestHead(head, policy);
  return e ? e->status() : 0;
}

RequestHead with(RequestHead head, const std::string& name, const std::string& value) {
  std::erase_if(head.headers, [&](const auto& h) { return h.first == name; });
  head.headers.emplace_back(name, value);
  return head;
}

RequestHead without(RequestHead head, const std::string& name) {
  std::erase_if(head.headers, [&](const auto& h) { return h.first == name; });
  return head;
}

}  // namespace

class TestRequestGuard : public QObject {
  Q_OBJECT

 private slots:
  void aJsonPostFromALocalProgramProceeds() { QCOMPARE(verdict(jsonPost(), loopback()), 0); }

  void loopbackBindAddressesAreRecognised() {
    QVERIFY(isLoopbackHost("127.0.0.1"));
    QVERIFY(isLoopbackHost("127.8.9.10"));
    QVERIFY(isLoopbackHost("::1"));
    QVERIFY(isLoopbackHost("localhost"));
    QVERIFY(!isLoopbackHost("0.0.0.0"));
    QVERIFY(!isLoopbackHost("::"));
    QVERIFY(!isLoopbackHost("192.168.1.5"));
    QVERIFY(!isLoopbackHost("128.0.0.1"));
    QVERIFY(!isLoopbackHost("myhost.lan"));
  }

  void aForeignHostOnALoopbackBindIsA403() {
    for (const char* host : {"evil.example", "evil.example:8080", "127.0.0.1.evil.example",
                             "localhost.evil.example:8080", "127.0.0.1:8081",
                             "localhost:", "localhost:+8080", "[::1]:80", ""}) {
      QCOMPARE(verdict(with(jsonPost(), "Host", host), loopback()), 403);
    }
  }

  void loopbackHostNamesWithOurPortOrNoneProceed() {
    for (const char* host :
         {"localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:8080"}) {
      QCOMPARE(verdict(with(jsonPost(), "Host", host), loopback()), 0);
    }
  }

  void twoHostHeadersAreRefused() {
    RequestHead head = jsonPost();
    head.headers.emplace_back("host", "127.0.0.1:8080");
    QCOMPARE(verdict(head, loopback()), 400);
  }

  void anyHostIsAcceptedBeyondLoopbackWhereTheKeyGuards() {
    GuardPolicy p = loopback("k");
    p.loopbackBind = false;
    RequestHead head = with(jsonPost(), "Host", "node.lan:8080");
    head.headers.emplace_back("Authorization", "Bearer k");
    QCOMPARE(verdict(head, p), 0);
  }

  void aForeignOriginOnALoopbackBindIsA403() {
    for (const char* origin : {"https://evil.example", "null", "http://localhost.evil.example",
                               "file://", "http://127.0.0.1@evil.example"}) {
      QCOMPARE(verdict(with(jsonPost(), "Origin", origin), loopback()), 403);
    }
    QCOMPARE(verdict(with(jsonPost(), "Origin", "http://localhost:3000"), loopback()), 0);
    QCOMPARE(verdict(with(jsonPost(), "Origin", "https://[::1]"), loopback()), 0);
  }

  void aMissingOrWrongKeyIsA401() {
    QCOMPARE(verdict(jsonPost(), loopback("s3cret")), 401);
    for (const char* auth : {"Bearer s3cre", "Bearer s3cret2", "Bearer S3CRET", "Basic s3cret",
                             "s3cret", "Bearer", ""}) {
      QCOMPARE(verdict(with(jsonPost(), "Authorization", auth), loopback("s3cret")), 401);
    }
  }

  void theRightKeyProceedsWhateverTheSchemeCase() {
    QCOMPARE(verdict(with(jsonPost(), "Authorization", "Bearer s3cret"), loopback("s3cret")), 0);
    QCOMPARE(verdict(with(jsonPost(), "Authorization", "bearer s3cret"), loopback("s3cret")), 0);
  }

  void twoAuthorizationHeadersAreRefused() {
    RequestHead head = with(jsonPost(), "Authorization", "Bearer s3cret");
    head.headers.emplace_back("Authorization", "Bearer s3cret");
    QCOMPARE(verdict(head, loopback("s3cret")), 401);
  }

  void healthNeedsNoKey() {
    const RequestHead health{"GET", "/health", {{"Host", "localhost:8080"}}};
    QCOMPARE(verdict(health, loopback("s3cret")), 0);
    QVERIFY(!hasApiKey(health, "s3cret"));
    QVERIFY(hasApiKey(health, ""));
  }

  void keyComparisonHandlesEveryLength() {
    QVERIFY(apiKeyMatches("Bearer abc", "abc"));
    QVERIFY(!apiKeyMatches("Bearer ab", "abc"));
    QVERIFY(!apiKeyMatches("Bearer abcd", "abc"));
    QVERIFY(!apiKeyMatches("Bearer " + std::string(1 << 16, 'a'), "abc"));
    QVERIFY(!apiKeyMatches("Bearer ", "abc"));
  }

  void aChunkedBodyIsA411() {
    QCOMPARE(verdict(with(jsonPost(), "Transfer-Encoding", "chunked"), loopback()), 411);
    QCOMPARE(verdict(with(jsonPost(), "transfer-encoding", "gzip, chunked"), loopback()), 411);
  }

  void aPostWithoutLengthIsA411() {
    QCOMPARE(verdict(without(jsonPost(), "Content-Length"), loopback()), 411);
  }

  void aBadOrRepeatedLengthIsA400() {
    for (const char* length : {"-1", "1e3", "0x10", "", "99999999999999999999999", "1 0"}) {
      QCOMPARE(verdict(with(jsonPost(), "Content-Length", length), loopback()), 400);
    }
    RequestHead head = jsonPost();
    head.headers.emplace_back("Content-Length", "10");
    QCOMPARE(verdict(head, loopback()), 400);
  }

  void aLengthAboveTheLimitIsA413() {
    QCOMPARE(verdict(with(jsonPost(), "Content-Length", std::to_string(kMaxBodyBytes)), loopback()),
             0);
    QCOMPARE(
        verdict(with(jsonPost(), "Content-Length", std::to_string(kMaxBodyBytes + 1)), loopback()),
        413);
  }

  void aBodyThatIsNotJsonIsA415() {
    for (const char* type :
         {"text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
          "multipart/form-data; b=x", "application/jsonx", "application/json-seq"}) {
      QCOMPARE(verdict(with(jsonPost(), "Content-Type", type), loopback()), 415);
    }
    QCOMPARE(verdict(without(jsonPost(), "Content-Type"), loopback()), 415);
    QCOMPARE(
        verdict(with(jsonPost(), "Content-Type", "Application/JSON; charset=utf-8"), loopback()),
        0);
  }

  void methodsOtherThanGetAndPostAreA405() {
    for (const char* method : {"PUT", "PATCH", "DELETE", "OPTIONS", "PRI", "TRACE"}) {
      RequestHead head = jsonPost();
      head.method = method;
      QCOMPARE(verdict(head, loopback()), 405);
    }
  }

  void refusalsQuoteABoundedPieceOfTheHeader() {
    const std::string huge(8000, 'h');
    const std::optional<ApiError> e = checkRequestHead(with(jsonPost(), "Host", huge), loopback());
    QVERIFY(e);
    QVERIFY(std::string(e->what()).size() < 300);
  }
};

QTEST_GUILESS_MAIN(TestRequestGuard)
#include "test_request_guard.moc"
