"""The hand-over's bytes: a state (nested dicts, lists and tuples of
tensors, numbers, strings, None) as data, never as code. Pure: no process
group, no I/O.

A peer's bytes are not trusted: pickle (torch.load with weights_only=False,
and torch 1.13 has no weights_only) runs any code they name. This format
has nothing to run: a JSON header that describes the tree and each
tensor's dtype, shape and place, then the tensors' raw bytes.

    offset 0   "DDPH" (4 bytes), version (u32 little-endian, 1),
               header length H (u64 little-endian)
    16         the header: UTF-8 JSON, H bytes
    16+H       zero padding to a multiple of 64
    D          the tensors' bytes, each at D + its offset (a multiple of 64)

The header: {"step": S, "tree": T, "tensors": [{"dtype": "float32",
"shape": [2, 3], "offset": 0, "nbytes": 24}, ...]}. A node T is a JSON
null, boolean, number or string as itself, or an object of one key:
{"list": [T...]}, {"tuple": [T...]}, {"dict": [[K, T]...]} (K a string or
an integer), {"odict": [[K, T]...], "meta": T} (an OrderedDict and its
_metadata, as a module's state_dict has) or {"tensor": I}. decode checks
every length, offset, dtype and shape against the bytes it has before it
makes a tensor, and raises HandoverRefused for anything else.
"""
import collections
import json
import struct

import torch

from .errors import HandoverRefused

MAGIC = b"DDPH"
VERSION = 1
PREFIX = struct.Struct("<4sIQ")
ALIGN = 64
MAX_HEADER = 256 << 20

_DTYPES = {name: getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "complex64", "complex128", "int64", "int32",
    "int16", "int8", "uint8", "bool") if hasattr(torch, name)}
_NAMES = {dt: name for name, dt in _DTYPES.items()}


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _raw(t):
    """A tensor's bytes as a 1-D uint8 CPU tensor (a view where it can)."""
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


def _tree(obj, tensors, path):
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if torch.is_tensor(obj):
        if obj.layout != torch.strided or obj.dtype not in _NAMES:
            raise TypeError("hand-over: %s is a %s %s tensor; only dense tensors of %s travel"
                            % (path, obj.layout, obj.dtype, ", ".join(sorted(_DTYPES))))
        tensors.append(obj)
        return {"tensor": len(tensors) - 1}
    if isinstance(obj, (list, tuple)):
        items = [_tree(v, tensors, "%s[%d]" % (path, i)) for i, v in enumerate(obj)]
        return {"tuple" if isinstance(obj, tuple) else "list": items}
    if isinstance(obj, dict):
        pairs = []
        for k, v in obj.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise TypeError("hand-over: %s has the key %r; only string and integer keys "
                                "travel" % (path, k))
            pairs.append([k, _tree(v, tensors, "%s[%r]" % (path, k))])
        if isinstance(obj, collections.OrderedDict):
            meta = getattr(obj, "_metadata", None)
            node = {"odict": pairs}
            if meta is not None:
                node["meta"] = _tree(dict(meta), tensors, path + "._metadata")
            return node
        return {"dict": pairs}
    raise TypeError("hand-over: %s is a %s; only tensors, numbers, strings, None, lists, "
                    "tuples and dicts travel" % (path, type(obj).__name__))


def check(state, path="state"):
    """Raises TypeError naming the first value of state that encode would
    refuse; copies nothing (the tensors are only looked at)."""
    _tree(state, [], path)


def encode(state, step):
    """The bytes of state (see the module's text) as a 1-D uint8 tensor.
    Raises TypeError naming the first value that cannot travel."""
    tensors = []
    tree = _tree(state, tensors, "state")
    raws = [_raw(t) for t in tensors]
    metas, off = [], 0
    for t, r in zip(tensors, raws):
        metas.append({"dtype": _NAMES[t.dtype], "shape": list(t.shape), "offset": off,
                      "nbytes": r.numel()})
        off = _align(off + r.numel())
    header = json.dumps({"step": int(step), "tree": tree, "tensors": metas},
                        separators=(",", ":")).encode()
    data = _align(PREFIX.size + len(header))
    out = torch.zeros(data + off, dtype=torch.uint8)
    head = PREFIX.pack(MAGIC, VERSION, len(header)) + header
    out[:len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8)
    for m, r in zip(metas, raws):
        out[data + m["offset"]:data + m["offset"] + m["nbytes"]] = r
    return out


def tensor_bytes(t):
    """The bytes of a 1-D uint8 CPU tensor (no numpy needed; b"" when empty)."""
    out = bytearray(t.numel())
    if out:
        torch.frombuffer(out, dtype=torch.uint8).copy_(t)
    return bytes(out)


def _refuse(why):
    return HandoverRefused("hand-over refused: %s (a peer that is not a ddplaunch.torch "
                           "worker of this version sent it)" % why)


def _header(buf):
    if buf.dim() != 1 or buf.dtype != torch.uint8:
        raise _refuse("not a byte tensor")
    if buf.numel() < PREFIX.size:
        raise _refuse("%d bytes, shorter than the %d-byte prefix" % (buf.numel(), PREFIX.size))
    magic, version, hlen = PREFIX.unpack(tensor_bytes(buf[:PREFIX.size]))
    if magic != MAGIC:
        raise _refuse("the bytes do not start with %r" % MAGIC)
    if version != VERSION:
        raise _refuse("format version %d, this one reads %d" % (version, VERSION))
    if hlen > MAX_HEADER or PREFIX.size + hlen > buf.numel():
        raise _refuse("a header of %d bytes in %d bytes" % (hlen, buf.numel()))
    try:
        h = json.loads(tensor_bytes(buf[PREFIX.size:PREFIX.size + hlen]).decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _refuse("the header is not JSON: %s" % e) from None
    if not isinstance(h, dict) or not isinstance(h.get("step"), int) or \
            not isinstance(h.get("tensors"), list) or "tree" not in h:
        raise _refuse("the header lacks step, tree or tensors")
    return h, _align(PREFIX.size + hlen)


def _tensor(buf, data, m):
    if not isinstance(m, dict) or not isinstance(m.get("dtype"), str) or \
            m.get("dtype") not in _DTYPES:
        raise _refuse("a tensor of unknown dtype %r" % (m.get("dtype") if isinstance(m, dict)
                                                       else m))
    dt, shape, off, n = _DTYPES[m["dtype"]], m.get("shape"), m.get("offset"), m.get("nbytes")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape) \
            or not isinstance(off, int) or not isinstance(n, int) or off < 0 or off % ALIGN:
        raise _refuse("a tensor's shape %r or offset %r is not valid" % (shape, off))
    numel = 1
    for d in shape:
        numel *= d
    size = torch.empty(0, dtype=dt).element_size()
    if n != numel * size or data + off + n > buf.numel():
        raise _refuse("a tensor of shape %s needs %d bytes at %d, %d given of %d" %
                      (shape, numel * size, off, n, buf.numel() - data))
    raw = buf[data + off:data + off + n]
    return (raw.view(dt) if dt != torch.uint8 else raw).reshape(shape).clone()


def _untree(node, tensors):
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict) or not node:
        raise _refuse("a tree node %r" % (node,))
    if "tensor" in node:
        i = node["tensor"]
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(tensors):
            raise _refuse("a tensor index %r of %d tensors" % (i, len(tensors)))
        return tensors[i]
    for kind, make in (("list", list), ("tuple", tuple)):
        if kind in node:
            if not isinstance(node[kind], list):
                raise _refuse("a %s that is not a list" % kind)
            return make(_untree(v, tensors) for v in node[kind])
    kind = "odict" if "odict" in node else "dict"
    pairs = node.get(kind)
    if not isinstance(pairs, list):
        raise _refuse("a tree node of keys %s" % sorted(node))
    out = collections.OrderedDict() if kind == "odict" else {}
    for p in pairs:
        if not isinstance(p, list) or len(p) != 2 or isinstance(p[0], bool) or \
                not isinstance(p[0], (str, int)):
            raise _refuse("a dict entry %r" % (p,))
        out[p[0]] = _untree(p[1], tensors)
    if kind == "odict" and "meta" in node:
        meta = _untree(node["meta"], tensors)
        if not isinstance(meta, dict):
            raise _refuse("an OrderedDict's _metadata that is not a dict")
        out._metadata = meta
    return out


def decode(buf):
    """(step, state) from encode's bytes (a 1-D uint8 CPU tensor): the
    tensors are copies, the buffer may go. Raises HandoverRefused for bytes
    that are not a hand-over of this format; nothing in them is run."""
    h, data = _header(buf)
    tensors = [_tensor(buf, data, m) for m in h["tensors"]]
    try:
        return h["step"], _untree(h["tree"], tensors)
    except RecursionError:
        raise _refuse("the tree is nested too deeply") from None
