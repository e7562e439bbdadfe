"""What the make_*.py scripts that write cases of tensors share: a tensor as one record of the
format tests/golden_file.h reads, and the loop that runs the cases and writes the file.

  case NAME
  tensor NAME [DTYPE] d0,d1,... v0 v1 ...   (values %.17g, inf/nan spelled so; 0-d dims are "-")
  raises                                      (PyTorch refused the program)
  end
"""
import os

import torch


def tensor_record(name, t, with_dtype=False, digits=17):
    """digits: 17 names every float64 exactly; 9 every float32."""
    t = t.detach()
    dims = ",".join(str(d) for d in t.shape) if t.dim() > 0 else "-"
    values = " ".join("%.*g" % (digits, v) for v in t.to(torch.float64).reshape(-1).tolist())
    dtype = str(t.dtype).replace("torch.", "") + " " if with_dtype else ""
    return ("tensor %s %s%s %s" % (name, dtype, dims, values)).rstrip()


def write_cases(out_path, cases, with_dtype=False, digits=17):
    """Runs every case (a function returning {name: tensor}); a case named *_refused must raise,
    and is written as "raises", so that a program PyTorch accepts cannot pass as a refusal."""
    lines = []
    for name, fn in cases.items():
        lines.append("case " + name)
        try:
            out = fn()
        except (RuntimeError, IndexError):
            if not name.endswith("_refused"):
                raise
            lines.append("raises")
        else:
            assert not name.endswith("_refused"), name + " was expected to raise"
            for key, t in out.items():
                assert t is not None, "%s: %s is None" % (name, key)
                lines.append(tensor_record(key, t, with_dtype, digits))
        lines.append("end")
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d cases to %s" % (len(cases), os.path.normpath(out_path)))
