"""The errors a re-formation ends with: one class per outcome, so that a
caller decides by the class, never by the message (libddp's codes in
worker/ddp.h are the same contract: -ENOTSUP, -EPIPE, -ETIMEDOUT, -ESTALE).

    ReformError            any of the below
      NotResizable         no agent channel (torchrun, plain python): the
                           group cannot be re-formed in place, restart it
      AgentGone            the launcher's agent closed the channel
      RoundTimeout         no new round came within round_timeout
      Superseded           a later round came while this one was forming or
                           handing over; Elastic's loop takes it and goes on,
                           it reaches a caller only from the lower-level
                           calls (group.in_thread, a Group's collectives)
      HandoverRefused      a peer's state was refused: ranks whose steps
                           differ by more than one, or a payload that is not
                           a well-formed hand-over
      NumericMismatch      the ranks' numeric identities differ (torch
                           version, threads, TF32, BLAS, device...: numerics.py)
                           at the start or at a join, and the mismatch was
                           not accepted (allow_numeric_mismatch)
      ReplicaMismatch      the replica check (replicas.py) found ranks whose
                           parameters or optimizer state differ and no strict
                           majority to heal them from (2 replicas, or a tie)

MembershipChanged is not an error of the re-formation but its cause: a
collective failed (a peer is gone). Elastic re-forms on it.
"""


class MembershipChanged(Exception):
    """A collective failed (a peer is gone): the step is redone in the next
    round."""


class ReformError(RuntimeError):
    """The base of the errors that end a re-formation."""


class NotResizable(ReformError):
    """No agent channel (not under ddplaunch): nothing is re-formed in place,
    the job restarts the workers."""


class AgentGone(ReformError):
    """The launcher's agent closed the channel: no round will come."""


class RoundTimeout(ReformError):
    """No new round from the agent in time."""


class Superseded(ReformError, MembershipChanged):
    """A later round came while this one was forming, handing over or
    waiting on a collective: the work is redone in the later round."""


class HandoverRefused(ReformError):
    """A peer's state was not taken: the steps held differ by more than one,
    or the bytes are not a hand-over of this format."""


class NumericMismatch(ReformError):
    """The ranks' numeric identities differ: the same bits cannot be
    promised. The message names both sides and what to set; the fields:
    key (what differs), ranks (the two ranks named), values (theirs)."""

    def __init__(self, message, key=None, ranks=None, values=None):
        super().__init__(message)
        self.key, self.ranks, self.values = key, ranks, values


class ReplicaMismatch(ReformError):
    """Replicas that must be bitwise equal differ and no strict majority
    holds one state to heal the others from. step, ranks (those outside the
    largest group), tensor (the first that differs)."""

    def __init__(self, message, step=None, ranks=None, tensor=None):
        super().__init__(message)
        self.step, self.ranks, self.tensor = step, ranks, tensor
