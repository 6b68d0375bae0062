"""ddplaunch.torch: a PyTorch training loop that a membership change does not
restart.

    from ddplaunch.torch import Elastic
    el = Elastic(model, optimizer, dataset_size=N, global_batch_size=G,
                 virtual_shards=V, seed=S)
    for step in el.steps(epochs=E):
        loss = el.step(closure)          # closure(indices) -> loss

Under ddplaunch the workers say they can be resized in place; when a node
dies or joins, the survivors keep their processes and their memory, take
the new round from their agent, form a fresh process group, hand the state
to any newcomer and redo the interrupted step with the same samples. The
gradients of the fixed virtual shards are summed exactly, so the final
weights are those of an undisturbed 1-rank run. A re-formation that cannot
go on raises one of errors.py's classes (ReformError and its subclasses).

Every state that changes the next step travels with the model (scheduler=,
scaler=, extra=, the RNG states: carry.py); the ranks' numeric identities
are compared at the start and at every join (numerics.py); after committed
steps the replicas are compared by digest and a bad one healed
(replicas.py).
"""
from .elastic import Elastic
from .errors import (AgentGone, HandoverRefused, NotResizable, NumericMismatch, ReformError,
                     ReplicaMismatch, RoundTimeout, Superseded)
from .exact import ExactSum
from .handover import state_digest
from .plan import Ledger, shards_range

__all__ = ["AgentGone", "Elastic", "ExactSum", "HandoverRefused", "Ledger", "NotResizable",
           "NumericMismatch", "ReformError", "ReplicaMismatch", "RoundTimeout", "Superseded",
           "shards_range", "state_digest"]
