// The beacon wire format (lan/discovery/beacon.h): what encodes decodes to the same fields, and
// every malformed datagram is rejected with the right kind.

#include <QtTest>
#include <cstring>
#include <string>
#include <vector>

#include "lan/discovery/beacon.h"

using shoal::lan::Beacon;
using shoal::lan::BeaconError;
using shoal::lan::decodeBeacon;
using shoal::lan::encodeBeacon;
using Kind = shoal::lan::BeaconError::Kind;

namespace {

Beacon sample() {
  Beacon b;
  b.deviceId = "MFZWI3D-BONSGYC-YLTMRWG-C43ENR5-QXGZDMM-FZWI3DP-BONSGYC-YLTMRWA";
  b.name = "workstation \xc3\xa9t\xc3\xa9";  // UTF-8 passes through
  b.tcpPort = 47475;
  b.nonce = "0123456789abcdef0123456789abcdef";
  b.summary = "cpu: 2 threads, 24 GiB; vulkan0: llvmpipe";
  return b;
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// "SHD" + version 1 + the given payload.
std::vector<uint8_t> framed(const std::string& payload) {
  return bytes(std::string("SHD\x01", 4) + payload);
}

Kind kindOf(const std::vector<uint8_t>& datagram) {
  try {
    decodeBeacon(datagram);
  } catch (const BeaconError& e) {
    return e.kind();
  }
  throw std::runtime_error("datagram was accepted");
}

}  // namespace

class TestBeacon : public QObject {
  Q_OBJECT

 private slots:
  void encodedBeaconDecodesToTheSameFields() {
    const Beacon in = sample();
    const Beacon out = decodeBeacon(encodeBeacon(in));
    QCOMPARE(out.deviceId, in.deviceId);
    QCOMPARE(out.name, in.name);
    QCOMPARE(out.tcpPort, in.tcpPort);
    QCOMPARE(out.nonce, in.nonce);
    QCOMPARE(out.summary, in.summary);
  }

  void datagramStartsWithMagicAndVersionThenJson() {
    const std::vector<uint8_t> d = encodeBeacon(sample());
    QVERIFY(d.size() > 4);
    QCOMPARE(std::string(d.begin(), d.begin() + 3), std::string("SHD"));
    QCOMPARE(int(d[3]), 1);
    QCOMPARE(char(d[4]), '{');
    QCOMPARE(char(d.back()), '}');
  }

  void emptySummaryIsAllowed() {
    Beacon b = sample();
    b.summary.clear();
    QCOMPARE(decodeBeacon(encodeBeacon(b)).summary, std::string());
  }

  void unknownKeysAreIgnored() {
    const Beacon b = decodeBeacon(
        framed(R"({"id":"ABC-234","name":"n","port":7,"nonce":"0123456789abcdef0123456789abcdef",)"
               R"("summary":"","future":{"x":[1,2]}})"));
    QCOMPARE(b.deviceId, std::string("ABC-234"));
    QCOMPARE(b.tcpPort, uint16_t(7));
  }

  void datagramLongerThanTheLimitIsTooLarge() {
    std::vector<uint8_t> d = encodeBeacon(sample());
    d.resize(shoal::lan::kMaxBeaconBytes + 1, ' ');  // trailing JSON whitespace, else valid
    QCOMPARE(kindOf(d), Kind::TooLarge);
  }

  void datagramWithoutTheMagicIsBadMagic() {
    std::vector<uint8_t> d = encodeBeacon(sample());
    d[0] = 'X';
    QCOMPARE(kindOf(d), Kind::BadMagic);
  }

  void datagramShorterThanTheHeaderIsBadMagic() {
    QCOMPARE(kindOf(bytes("SH")), Kind::BadMagic);
    QCOMPARE(kindOf({}), Kind::BadMagic);
  }

  void otherProtocolVersionIsUnsupported() {
    std::vector<uint8_t> d = encodeBeacon(sample());
    d[3] = 2;
    QCOMPARE(kindOf(d), Kind::UnsupportedVersion);
  }

  void payloadThatIsNotAJsonObjectIsMalformed() {
    QCOMPARE(kindOf(framed("")), Kind::Malformed);
    QCOMPARE(kindOf(framed("[1,2]")), Kind::Malformed);
    QCOMPARE(kindOf(framed("{\"id\":")), Kind::Malformed);
    QCOMPARE(kindOf(framed("{} trailing")), Kind::Malformed);
    QCOMPARE(kindOf(framed("{\"name\":\"\xff\xfe\"}")), Kind::Malformed);  // invalid UTF-8
  }

  void missingOrMistypedFieldIsMalformed_data() {
    QTest::addColumn<QString>("payload");
    const QString nonce = "\"nonce\":\"0123456789abcdef0123456789abcdef\"";
    QTest::newRow("no id") << R"({"name":"n","port":7,"summary":"",)" + nonce + "}";
    QTest::newRow("no name") << R"({"id":"A","port":7,"summary":"",)" + nonce + "}";
    QTest::newRow("no port") << R"({"id":"A","name":"n","summary":"",)" + nonce + "}";
    QTest::newRow("no nonce") << R"({"id":"A","name":"n","port":7,"summary":""})";
    QTest::newRow("no summary") << R"({"id":"A","name":"n","port":7,)" + nonce + "}";
    QTest::newRow("id number") << R"({"id":5,"name":"n","port":7,"summary":"",)" + nonce + "}";
    QTest::newRow("port string") << R"({"id":"A","name":"n","port":"7","summary":"",)" + nonce +
                                        "}";
    QTest::newRow("port float") << R"({"id":"A","name":"n","port":7.5,"summary":"",)" + nonce + "}";
  }
  void missingOrMistypedFieldIsMalformed() {
    QFETCH(QString, payload);
    QCOMPARE(kindOf(framed(payload.toStdString())), Kind::Malformed);
  }

  void fieldOutsideItsLimitsIsMalformed_data() {
    QTest::addColumn<int>("field");
    for (int i = 0; i < 9; ++i) QTest::newRow(QByteArray::number(i).constData()) << i;
  }
  void fieldOutsideItsLimitsIsMalformed() {
    QFETCH(int, field);
    Beacon b = sample();
    int port = b.tcpPort;
    switch (field) {
      case 0:
        b.deviceId = "lowercase-id";
        break;
      case 1:
        b.deviceId = "";
        break;
      case 2:
        b.deviceId = std::string(shoal::lan::kMaxDeviceIdChars + 1, 'A');
        break;
      case 3:
        b.name = "";
        break;
      case 4:
        b.name = std::string(shoal::lan::kMaxNameBytes + 1, 'n');
        break;
      case 5:
        port = 0;
        break;
      case 6:
        port = 65536;
        break;
      case 7:
        b.nonce = "0123456789ABCDEF0123456789ABCDEF";
        break;  // upper case
      case 8:
        b.nonce = "0123";
        break;
    }
    const std::string payload = "{\"id\":\"" + b.deviceId + "\",\"name\":\"" + b.name +
                                "\",\"port\":" + std::to_string(port) + ",\"nonce\":\"" + b.nonce +
                                "\",\"summary\":\"\"}";
    QCOMPARE(kindOf(framed(payload)), Kind::Malformed);
  }

  void encodingRefusesFieldsOutsideTheirLimits() {
    Beacon b = sample();
    b.summary = std::string(shoal::lan::kMaxSummaryBytes + 1, 's');
    QVERIFY_THROWS_EXCEPTION(BeaconError, encodeBeacon(b));
    b = sample();
    b.tcpPort = 0;
    QVERIFY_THROWS_EXCEPTION(BeaconError, encodeBeacon(b));
  }

  void encodingRefusesABeaconThatEscapesPastTheDatagramLimit() {
    Beacon b = sample();
    b.summary = std::string(shoal::lan::kMaxSummaryBytes, '\x01');  // each becomes \u0001
    try {
      encodeBeacon(b);
      QFAIL("an over-long encoding was accepted");
    } catch (const BeaconError& e) {
      QCOMPARE(e.kind(), Kind::TooLarge);
      QVERIFY2(std::strstr(e.what(), "1400") != nullptr, e.what());
    }
  }

  void noncesAreFreshLowercaseHex() {
    const std::string a = shoal::lan::makeBeaconNonce();
    const std::string b = shoal::lan::makeBeaconNonce();
    QCOMPARE(a.size(), shoal::lan::kNonceHexChars);
    QVERIFY(a.find_first_not_of("0123456789abcdef") == std::string::npos);
    QVERIFY(a != b);
  }
};

QTEST_GUILESS_MAIN(TestBeacon)
#include "test_beacon.moc"
