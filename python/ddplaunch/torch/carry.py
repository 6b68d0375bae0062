"""What Elastic carries beside the model, the optimizer and the ledger:
every other state that changes the next step. The LR scheduler, a
gradient scaler, the random number generators (torch's CPU generator, the
CUDA generators where the parameters are on a GPU, Python's `random`) and
any object the script registers (anything with state_dict() and
load_state_dict()). They travel in the hand-over and sit in
Elastic.state_dict(), so a joiner and a resumed job hold the same state as
a rank that never stopped.

A state that cannot travel is refused when it is registered, with the
reason (TypeError, as state_codec.encode refuses it): an object without
state_dict/load_state_dict, or whose state_dict holds anything but
tensors, numbers, strings, None, lists, tuples and dicts (the hand-over
is data, never a pickle). No process group, no I/O.
"""
import collections
import random

import torch

from . import state_codec


def _check(obj, what):
    for fn in ("state_dict", "load_state_dict"):
        if not callable(getattr(obj, fn, None)):
            raise TypeError(
                "%s is a %s without %s(): Elastic carries only states it can save and load; "
                "give it state_dict() and load_state_dict(), or keep it out of Elastic (its "
                "state would not follow a hand-over or a checkpoint)"
                % (what, type(obj).__name__, fn))
    state_codec.check(obj.state_dict(), what + ".state_dict()")


def _plateau(sched):
    cls = getattr(torch.optim.lr_scheduler, "ReduceLROnPlateau", None)
    return cls is not None and isinstance(sched, cls)


class Carried:
    """The states beside the model's, optimizer's and ledger's, and the two
    of them that Elastic steps (scheduler, scaler)."""

    def __init__(self, device, scheduler=None, scaler=None, extra=None):
        self.device = device
        self.scheduler, self.scaler = scheduler, scaler
        self.extra = collections.OrderedDict()
        if scheduler is not None:
            _check(scheduler, "scheduler")
        if scaler is not None:
            _check(scaler, "scaler")
        for name, obj in (extra or {}).items():
            self.register(name, obj)

    def register(self, name, obj):
        if not isinstance(name, str) or not name:
            raise TypeError("extra state names are non-empty strings, not %r" % (name,))
        if name in self.extra:
            raise ValueError("extra state %r is registered already: pick another name" % name)
        _check(obj, "extra[%r]" % name)
        self.extra[name] = obj

    # -- the step ------------------------------------------------------

    def optimizer_step(self, optimizer):
        """optimizer.step(), through the scaler when there is one (it
        unscales the gradients and skips the step when one is not finite)."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def scheduler_step(self, loss):
        """The scheduler's step, once per committed step (ReduceLROnPlateau
        is given the global batch's loss)."""
        if self.scheduler is None:
            return
        if _plateau(self.scheduler):
            self.scheduler.step(loss)
        else:
            self.scheduler.step()

    # -- the state -----------------------------------------------------

    def rng_state(self):
        out = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if self.device.type == "cuda":
            out["cuda"] = torch.cuda.get_rng_state_all()
        return out

    def load_rng_state(self, st):
        torch.set_rng_state(st["torch"])
        v, inner, gauss = st["python"]
        random.setstate((int(v), tuple(int(x) for x in inner), gauss))
        if self.device.type == "cuda" and "cuda" in st:
            torch.cuda.set_rng_state_all(list(st["cuda"]))

    def state_dict(self):
        """The carried states, keyed as Elastic.state_dict() holds them."""
        out = {"rng": self.rng_state()}
        if self.scheduler is not None:
            out["scheduler"] = self.scheduler.state_dict()
        if self.scaler is not None:
            out["scaler"] = self.scaler.state_dict()
        if self.extra:
            out["extra"] = {k: v.state_dict() for k, v in self.extra.items()}
        return out

    def load_state_dict(self, sd):
        """From an Elastic.state_dict(). A state this object carries that sd
        lacks (a checkpoint saved without scheduler=...) is a ValueError
        naming it; "rng" is optional (checkpoints made before it was
        carried)."""
        for key, obj in (("scheduler", self.scheduler), ("scaler", self.scaler)):
            if obj is not None and key not in sd:
                raise ValueError("the state has no %s: it was saved by an Elastic without "
                                 "%s=...; resume it with the same arguments" % (key, key))
        missing = [k for k in self.extra if k not in sd.get("extra", {})]
        if missing:
            raise ValueError("the state has no extra state %s: it was saved without them; "
                             "register the same names on every rank" % ", ".join(missing))
        if self.scheduler is not None:
            self.scheduler.load_state_dict(sd["scheduler"])
        if self.scaler is not None:
            self.scaler.load_state_dict(sd["scaler"])
        for k, obj in self.extra.items():
            obj.load_state_dict(sd["extra"][k])
        if "rng" in sd:
            self.load_rng_state(sd["rng"])
