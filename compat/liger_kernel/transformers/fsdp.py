"""``_FSDPForwardRedirection`` (Liger-Kernel's, which Axolotl imports): run a method of a module
wrapped by FSDP (version 1, FullyShardedDataParallel) as the wrapper's forward, so FSDP's pre- and
post-forward (the all-gather and release of the sharded parameters) happen around it."""

from liger_kernel._surface import complete


class _FSDPForwardRedirection:
    """``redirect(wrapper_module, method, *args, **kwargs)``: ``method(*args, **kwargs)`` run inside
    ``wrapper_module``'s forward (the wrapped module's forward is swapped for the call)."""

    def __call__(self, wrapper_module, method, *args, **kwargs):
        inner = getattr(wrapper_module, "_fsdp_wrapped_module", None) or wrapper_module.module
        own = vars(inner).get("forward")  # an instance-level forward, if the module had one

        def restore():
            if own is None:
                vars(inner).pop("forward", None)
            else:
                inner.forward = own

        def redirected(*_args, **_kwargs):
            restore()  # before the method runs: it may call the module itself
            return method(*_args, **_kwargs)

        inner.forward = redirected
        try:
            return wrapper_module(*args, **kwargs)
        finally:
            restore()


complete(globals())
