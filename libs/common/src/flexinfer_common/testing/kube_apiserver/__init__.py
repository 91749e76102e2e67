"""An in-process fake Kubernetes apiserver serving the real REST paths, for tests.

There is no kube-apiserver where FlexInfer's tests run; this one stands in for it. The
official ``kubernetes`` client talks to it over HTTP exactly as to a real cluster:

* core/v1 Namespaces, ConfigMaps, Secrets, ServiceAccounts, Services, PVCs, Pods (with a
  ``log`` subresource: ``set_pod_log``, and ``follow=true`` streams what ``append_pod_log``
  adds until the client leaves or the pod is deleted); apps/v1 Deployments; batch/v1 Jobs;
  policy/v1 PDBs; coordination.k8s.io/v1 Leases; and every CRD loaded from YAML
  (``k8s/crds``), validated against its openAPIV3Schema with its defaults applied and
  unknown fields pruned;
* get, list (label selectors =, ==, !=, in, notin, exists, !exists; metadata.name and
  metadata.namespace field selectors), create (409 AlreadyExists), update (409 on a stale
  resourceVersion), patch (JSON merge patch; strategic merge patch applied as a merge
  patch; JSON patch without move/copy; no server-side apply), delete (finalizers keep the
  object with a deletionTimestamp), the status subresource, server-side defaults;
* watch with resourceVersion, bookmarks, 410 Gone from a compacted history, selectors.

Not modelled: controllers (nothing scales a Deployment or runs a Pod: set their status
with ``set_status``), garbage collection, admission webhooks, RBAC enforcement (the call
log says what RBAC would need), pagination (``limit`` is ignored), dry runs (400).
"""

from flexinfer_common.testing.kube_apiserver.errors import ApiError
from flexinfer_common.testing.kube_apiserver.hooks import ANY, Call
from flexinfer_common.testing.kube_apiserver.server import KubeApiServer
from flexinfer_common.testing.kube_apiserver.types import ResourceType, find_crd_dir, load_crds

__all__ = ["ANY", "ApiError", "Call", "KubeApiServer", "ResourceType", "find_crd_dir", "load_crds"]
