"""detnccl's start-up hook for Python jobs: PyTorch steps with no change to the job (docs/python.md).

`detnccl run` puts this folder first on PYTHONPATH, so Python imports this file at start-up instead of any other
sitecustomize (which it then runs: see _run_shadowed_sitecustomize). When the detnccl shim is preloaded into the
process and DETNCCL_STEP_INFERENCE / DETNCCL_STEP_BOUNDARY leave step numbering to detnccl, it arms an import hook
for torch.optim.optimizer; only if the job imports torch does detnccl_autostep (beside this file) set up the
optimizer step hook. Otherwise it imports nothing but ctypes and importlib's own modules, and changes nothing.

Nothing here may raise into the job: a failure of ours is one line on stderr starting "detnccl:".
"""

import os
import sys

# The module whose loading arms the optimizer hook: torch imports it during `import torch`.
_OPTIMIZER_MODULE = "torch.optim.optimizer"
# The sitecustomize module this one hid and ran, if any.
_shadowed_sitecustomize = None


def _say(message):
    try:
        sys.stderr.write("detnccl: %s\n" % " ".join(str(message).split()))  # one line, whatever the error said
    except Exception:  # noqa: BLE001 - a closed stderr must not stop the job either
        pass


def _steps_left_to_the_optimizer():
    # RATIONALE: the user chose another numbering: the call pattern only (calls), none (off), or a boundary call.
    inference = os.environ.get("DETNCCL_STEP_INFERENCE", "").strip().lower()
    if inference in ("calls", "off"):
        return False
    return os.environ.get("DETNCCL_STEP_BOUNDARY", "").strip() == ""


def _shim_entry_point():
    """detnccl_set_optimizer_step of the preloaded shim, or None when the shim is not in this process."""
    import ctypes

    try:
        # The shim's symbols are in the process's global scope: look there, never load anything.
        entry = ctypes.CDLL(None).detnccl_set_optimizer_step
    except (AttributeError, OSError):
        return None
    entry.argtypes = [ctypes.c_uint64]
    entry.restype = None
    return entry


class DetncclOptimizerImportHook:
    """A sys.meta_path finder that lets torch.optim.optimizer load as usual, then hands the module to
    detnccl_autostep. It finds nothing itself, and leaves sys.meta_path once it has seen the module."""

    def __init__(self, set_optimizer_step):
        self._set_optimizer_step = set_optimizer_step
        self._searching = False

    def find_spec(self, name, path=None, target=None):
        if name != _OPTIMIZER_MODULE or self._searching:
            return None
        try:
            return self._spec_with_hook(name, path, target)
        except Exception as error:  # noqa: BLE001 - the import goes on without us
            _say("PyTorch optimizer steps are not tracked (import hook: %s: %s)" % (type(error).__name__, error))
            self._leave_meta_path()
            return None

    def _spec_with_hook(self, name, path, target):
        # The spec the rest of the import system finds (the same walk as importlib's own), found without us.
        self._searching = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find_spec = getattr(finder, "find_spec", None)
                if finder is self or find_spec is None:
                    continue
                spec = find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self._searching = False
        self._leave_meta_path()
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # not ours to handle: the import system goes on and finds what it finds
        loader = spec.loader
        execute = loader.exec_module
        hook = self

        def exec_module(module):
            execute(module)
            if getattr(module, "__name__", None) == _OPTIMIZER_MODULE:
                hook._loaded(module)

        # RATIONALE: the loader object stays the one torch's module would have (module.__loader__, __spec__.loader,
        # isinstance checks); only this instance's exec_module is wrapped, and only for this module's load.
        loader.exec_module = exec_module
        return spec

    def _leave_meta_path(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def _loaded(self, module):
        try:
            _load_autostep().install(module, self._set_optimizer_step)
        except Exception as error:  # noqa: BLE001 - the job goes on without optimizer steps
            _say("PyTorch optimizer steps are not tracked (%s: %s)" % (type(error).__name__, error))


def _load_autostep():
    """detnccl_autostep from this file's folder (whatever the job has done to sys.path since start-up)."""
    import importlib.util

    if "detnccl_autostep" in sys.modules:
        return sys.modules["detnccl_autostep"]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "detnccl_autostep.py")
    spec = importlib.util.spec_from_file_location("detnccl_autostep", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["detnccl_autostep"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["detnccl_autostep"]
        raise
    return module


def _install():
    if not _steps_left_to_the_optimizer():
        return
    if any(type(finder).__name__ == DetncclOptimizerImportHook.__name__ for finder in sys.meta_path):
        return  # another copy of this folder came first on PYTHONPATH and ran us: one hook is enough
    set_optimizer_step = _shim_entry_point()
    if set_optimizer_step is None:
        return
    hook = DetncclOptimizerImportHook(set_optimizer_step)
    if _OPTIMIZER_MODULE in sys.modules:  # imported before us (a sitecustomize loaded late): hook it now
        hook._loaded(sys.modules[_OPTIMIZER_MODULE])
    else:
        sys.meta_path.insert(0, hook)


def _same_directory(entry, directory):
    try:
        return os.path.realpath(entry or os.curdir) == directory
    except (TypeError, ValueError):
        return False


def _run_shadowed_sitecustomize():
    """Runs the sitecustomize this one hides: the first found on sys.path after this file's folder (Debian's
    /etc/python3.X/sitecustomize.py, a virtual environment's, the user's own on PYTHONPATH), as site.py would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    entries = list(sys.path)
    start = 0
    for index, entry in enumerate(entries):
        if isinstance(entry, str) and _same_directory(entry, here):
            start = index + 1
            break
    rest = [entry for entry in entries[start:] if not (isinstance(entry, str) and _same_directory(entry, here))]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # The same handling of its errors as site.execsitecustomize: reported, never fatal.
    try:
        try:
            spec.loader.exec_module(module)
        except ImportError as error:
            if error.name != "sitecustomize":
                raise
    except Exception as error:  # noqa: BLE001 - what site.py does with a failing sitecustomize
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n" %
                             (error.__class__.__name__, error))
    global _shadowed_sitecustomize
    _shadowed_sitecustomize = module


try:
    _install()
except Exception as _error:  # noqa: BLE001 - never stop the job
    _say("PyTorch optimizer steps are not tracked (start-up: %s: %s)" % (type(_error).__name__, _error))
try:
    _run_shadowed_sitecustomize()
except Exception as _error:  # noqa: BLE001 - our search for it failed, not the other sitecustomize
    _say("the sitecustomize this one hides was not run (%s: %s)" % (type(_error).__name__, _error))
