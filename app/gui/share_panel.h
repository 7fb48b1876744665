#pragma once
// "Let other computers use this one": the part of the pool page that lets another machine's
// coordinator (its app, or `shoal-cli pool pair`) pair with this computer's node — the node the
// app runs when it shares this computer (PoolController::shareThisComputer). It shows the node's
// device ID (selectable, with Copy), the addresses it listens on, and on request a fresh pairing
// code, big, with the time it stays valid; New code replaces it (the old one stops working).
//
// It lives on the pool page rather than in Settings because it shows live state of the pool's
// node (its port, a code that expires), not a preference, and because the page already holds the
// other half of pairing (Pair… with a node's code).
//
// Like PoolSetupPanel it only shows and asks: pairingCodeRequested goes to
// PoolController::showPairingCode (queued, PoolView::attachController), the answers come back
// through the slots.

#include <QGroupBox>
#include <QStringList>

class QLabel;
class QPushButton;
class QTimer;

namespace shoal::gui {

class SharePanel : public QGroupBox {
  Q_OBJECT

 public:
  // How long a code stays valid: long enough to walk to the other computer and type it, short
  // enough that a code seen over a shoulder is soon useless; as shoal-node --pair's.
  static constexpr int kCodeValidSeconds = 300;

  explicit SharePanel(QWidget* parent = nullptr);

  QString deviceIdText() const;
  // "host:port" of each address the node listens on, comma-separated, loopback last.
  QString addressText() const;
  // The code shown ("ABCD-EFGH"); empty when none is (not asked yet, or expired).
  QString codeText() const;
  // "valid for 9:58 more", or why there is no code.
  QString expiryText() const;
  QPushButton* showCodeButton() const { return m_showCode; }
  QPushButton* newCodeButton() const { return m_newCode; }
  QPushButton* copyButton() const { return m_copy; }

 signals:
  void pairingCodeRequested(int validForSeconds);  // to PoolController::showPairingCode

 public slots:
  // This computer's node is up: what a coordinator elsewhere pairs with.
  void onSharing(const QString& nodeDeviceId, int port, const QStringList& addresses);
  void showPairingCode(const QString& code, qint64 expiresAtMs);
  // The controller's failure; shown here only while a code was asked for.
  void onFailed(const QString& text);

 private:
  void requestCode();
  void updateTimeLeft();  // every second while a code is shown

  QLabel* m_intro = nullptr;
  QWidget* m_details = nullptr;  // the rows below, shown once this computer is shared
  QLabel* m_deviceId = nullptr;
  QPushButton* m_copy = nullptr;
  QLabel* m_addresses = nullptr;
  QPushButton* m_showCode = nullptr;
  QPushButton* m_newCode = nullptr;
  QLabel* m_code = nullptr;
  QLabel* m_expiry = nullptr;
  QTimer* m_tick = nullptr;
  qint64 m_expiresAtMs = 0;
  bool m_shared = false;
  bool m_asking = false;  // a code was requested, no answer yet
};

}  // namespace shoal::gui
