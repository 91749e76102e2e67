"""The legacy ModelCache (ai.flexinfer/v1alpha1): storage, download Jobs and status, decided
purely (``plan``, ``status``) and carried out through a small port (``reconcile``).

The apiserver side is ``flexinfer_controller.adapters.kube.modelcaches``.
"""
