"""The Kubernetes apiserver client and informers the services share.

``client`` wraps the official ``kubernetes`` client (blocking calls in worker threads, its
errors mapped to ``flexinfer_common.errors``); ``informer`` keeps an in-memory cache of one
kind in sync (list, watch resumed from the last resourceVersion, relist on 410 Gone);
``listwatch`` says where an informer lists and watches core objects. Only adapters import
this package (an import-linter contract), so services' cores stay free of Kubernetes.
"""
