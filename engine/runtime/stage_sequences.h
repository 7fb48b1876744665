#pragma once
// What every stage implementation shares: checking a batch against its spec and the positions
// cached per sequence, counting positions as batches are submitted, truncating. Backends hold
// one SequenceBook and call check() then commit() in submit(); LocalStage is the base of stages
// that compute inside submit().

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/stage.h"

namespace shoal::runtime {

class SequenceBook {
 public:
  // `who` starts every error message ("CPU stage"). nLayer, nVocab and nEmbd are the model's.
  // Throws shoal::Error when the spec is unusable (layer range outside [0, nLayer), a
  // non-positive context, sequence count or batch).
  SequenceBook(std::string who, const StageSpec& spec, int32_t nLayer, int32_t nVocab,
               int32_t nEmbd);

  // Throws shoal::Error for a batch the stage must refuse: no segments, a sequence out of range
  // or twice in one batch, rows outside 1..maxBatch, positions that do not follow the cached
  // ones or pass the context, token ids outside the vocabulary, a hidden-state size that does
  // not match. (Stages without the head ignore the segments' logits field.) rowsElsewhere: the
  // stage gets its rows by another way (a remote stage linked directly to the previous node; a
  // first stage's token ids coming round a ring from the head's node), so the batch carries none
  // to check.
  void check(const Batch& batch, bool rowsElsewhere = false) const;
  // Counts the batch's positions as cached (call once it is submitted).
  void commit(const Batch& batch);
  // Forgets positions >= fromPosition; returns the positions kept: fromPosition, or 0 where a
  // ring (keepRing) no longer holds the window a batch at fromPosition would read, so the
  // sequence starts over. Throws for a bad sequence.
  int32_t truncate(int32_t sequence, int32_t fromPosition);
  int32_t cached(int32_t sequence) const;  // 0 for a bad sequence

  // The stage keeps a layer's cache as a ring of `period` positions over a window of `window`
  // (engine/model/kv_ring.h): check() then refuses a batch that starts where the ring no
  // longer holds the window before it (other than at 0), and truncate() starts such a
  // sequence over.
  void keepRing(int32_t period, int32_t window);
  // The lowest position > 0 a batch of `sequence` may start at (0: any).
  int32_t resumeFloor(int32_t sequence) const;

  // Rows of the batch whose logits are wanted.
  static int32_t logitRows(const Batch& batch);

  const std::string& who() const { return m_who; }

 private:
  std::string m_who;
  StageSpec m_spec;
  int32_t m_nVocab, m_nEmbd;
  std::vector<int32_t> m_cached;     // positions per sequence
  std::vector<int32_t> m_highWater;  // per sequence: one past the highest position written
  struct Ring {
    int32_t period, window;
  };
  std::vector<Ring> m_rings;
};

// A stage that computes while submit() runs; wait() only checks the ticket.
class LocalStage : public Stage {
 public:
  Ticket submit(const Batch& batch, StageOutput& output) final;
  void wait(Ticket ticket) final;

 protected:
  // Checked already (by the derived class's own SequenceBook in run(): LocalStage does not
  // know the model). Fills output.
  virtual void run(const Batch& batch, StageOutput& output) = 0;

 private:
  Ticket m_submitted = 0;
};

}  // namespace shoal::runtime
