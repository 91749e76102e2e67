"""The extender protocol and the node cache, free of any web framework.

The placement logic itself (filters, scorers, the score) lives in
``flexinfer_common.placement``, shared with the controller's local runtime; this package
turns kube-scheduler's ExtenderArgs into its inputs and its outputs into
ExtenderFilterResult and HostPriorityList.
"""
