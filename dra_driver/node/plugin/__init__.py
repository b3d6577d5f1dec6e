"""The kubelet plugin: registration, DRA node service (v1, v1beta1), health stream, prepare/unprepare."""
