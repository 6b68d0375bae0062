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
