#pragma once
// A node's identity: a self-signed X.509 certificate (EC P-256 key, CN "shoal", valid 20 years)
// kept in <configDir>/identity/{cert.pem,key.pem}. The device ID is what users compare and trust
// stores hold: SHA-256 of the certificate's DER encoding, in base32 (RFC 4648 alphabet, no
// padding) with a Luhn mod-32 check character after each 13-character quarter, grouped by 7:
// "MFZWI3D-BONSGYC-..." (8 groups, 63 characters) — the Syncthing layout, so a mistyped ID is
// caught by its check characters.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace shoal::lan {

struct Identity {
  std::string certPem;   // the certificate, PEM
  std::string keyPem;    // its private key, PEM (PKCS#8)
  std::string deviceId;  // formatted device ID of certPem
};

// Reads the identity from <configDir>/identity, creating a new key and certificate when neither
// file exists: both are written and fsynced in a temporary directory that is then renamed into
// place (so a crash leaves no identity or a whole one), the config directory (when created here)
// and identity/ with mode 0700, key.pem 0600; an identity/ of an older version is tightened to
// the same. Of two processes creating it at once, one wins and the other loads its identity.
// Throws shoal::Error, one line naming the files and what to do, when only one of the two files
// exists (a half-written identity of an older version, or a lost file), when one is empty or
// cannot be parsed, or when the key does not belong to the certificate: a node never silently
// replaces its identity.
Identity loadOrCreateIdentity(const std::filesystem::path& configDir);

// A fresh identity in memory (tests, throwaway clients). Throws shoal::Error.
Identity createIdentity();

// Formats a 32-byte SHA-256 digest as a device ID. Throws shoal::Error on another length.
std::string formatDeviceId(std::span<const uint8_t> sha256);

// The device ID of a DER-encoded certificate / of a PEM certificate (throws shoal::Error when
// the PEM does not parse).
std::string deviceIdFromCertificateDer(std::span<const uint8_t> der);
std::string deviceIdFromCertificatePem(const std::string& certPem);

// The canonical form of a device ID typed by a person: upper case, dashes and spaces removed
// and re-inserted, check characters verified. Throws shoal::Error naming what is wrong.
std::string normalizeDeviceId(const std::string& text);

// The raw 32-byte SHA-256 digest a device ID encodes (check characters verified).
std::vector<uint8_t> deviceIdDigest(const std::string& deviceId);

}  // namespace shoal::lan
