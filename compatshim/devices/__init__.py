"""The devices compatshim runs on: one :class:`~compatshim.devices.accelerator.Accelerator` each for the CPU fake
accelerator, cuda and mps (the only place that tells devices apart by name), and the fake accelerator's tensor and
Composer devices (:mod:`~compatshim.devices.fake`; :mod:`compatshim.testing` is their public home)."""
