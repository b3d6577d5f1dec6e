"""Changed documents keep every line outside the edited blocks byte for byte (no shared corpus needed)."""

from __future__ import annotations

import yaml

from migrate_testlib import run

# Three-space indentation, `image:  x`, a flow sequence, a block scalar with '#' lines, comments, no final newline.
ODD = """apiVersion: apps/v1
kind: Deployment
metadata:
   name: odd   # three-space indentation
spec:
   template:
      spec:
         containers:
            - name: main
              image:  registry.example.com/app:1
              command: [ "python",   "-c" ]
              args:
                 - |
                   # not a comment: part of the script
                   print("hi")
              resources:
                 limits:
                    memory: 1Gi
                    nvidia.com/gpu: 2
              ports: [ {containerPort: 80} ]
         volumes: []
# trailing comment"""


def test_only_the_edited_blocks_change() -> None:
    result, _ = run(ODD, tolerations=False)
    deployment = result.output.split("---\n")[-1]
    assert deployment.endswith("# trailing comment")  # still no final newline
    removed = [line for line in ODD.splitlines() if line not in deployment.splitlines()]
    assert removed == ["                    nvidia.com/gpu: 2"]
    added = [line for line in deployment.splitlines() if line not in ODD.splitlines()]
    assert [line.strip() for line in added] == ["claims:", "- name: accelerators", "resourceClaims:",
                                                "- name: accelerators", added[-1].strip()]
    spec = yaml.safe_load(deployment)["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"] == {"limits": {"memory": "1Gi"}, "claims": [{"name": "accelerators"}]}
    assert spec["containers"][0]["args"] == ['# not a comment: part of the script\nprint("hi")\n']
    assert spec["resourceClaims"][0]["resourceClaimTemplateName"].startswith("odd-accelerators-")


def test_a_flow_style_resources_map_is_rewritten_as_one_line() -> None:
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image:  x\n"
            "    resources: {limits: {nvidia.com/gpu: 1}}\n")
    result, _ = run(text)
    pod = result.output.split("---\n")[-1]
    assert "    image:  x\n" in pod and "metadata: {name: p}\n" in pod
    assert "    resources: {claims: [{name: accelerators}]}\n" in pod


def test_the_comment_on_a_removed_device_line_moves_to_its_claim_entry() -> None:
    text = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: x\n"
            "    resources:\n      limits:\n        amd.com/gpu: 2  # Request 2 AMD GPUs\n")
    result, _ = run(text)
    assert "      - name: accelerators  # Request 2 AMD GPUs\n" in result.output
    again, _ = run(result.output)
    assert again.output == result.output


def test_a_comment_inside_an_emptied_limits_map_is_kept() -> None:
    text = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: x\n"
            "    resources:\n      limits:\n        # The number of GPUs per worker\n        nvidia.com/gpu: 1\n")
    result, _ = run(text)
    assert "    resources:\n      # The number of GPUs per worker\n      claims:\n" in result.output


RAY_ONE_GPU_GROUP = """apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: raycluster-kuberay
spec:
  rayVersion: '2.9.0'
  headGroupSpec:
    rayStartParams:
      dashboard-host: '0.0.0.0'
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.9.0
          resources:
            limits:
              cpu: 1
              memory: 2G
            requests:
              cpu: 1
              memory: 2G
          ports:
          - containerPort: 6379
            name: gcs-server
  workerGroupSpecs:
  - replicas: 1
    minReplicas: 1
    maxReplicas: 5
    groupName: small-group
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.9.0
          resources:
            limits:
              cpu: 1
              memory: 1G
  - replicas: 1
    groupName: gpu-group
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.9.0-gpu
          resources:
            limits:
              cpu: 4
              memory: 16G
              nvidia.com/gpu: 1
            requests:
              cpu: 4
              memory: 16G
              nvidia.com/gpu: 1
        tolerations:
          - key: ray.io/node-type
            operator: Equal
            value: worker
            effect: NoSchedule
"""


def test_a_ray_cluster_with_one_converted_group_keeps_every_other_line() -> None:
    result, _ = run(RAY_ONE_GPU_GROUP)
    cluster = result.output.split("---\n")[-1]
    original = RAY_ONE_GPU_GROUP.splitlines()
    removed = [line for line in original if line not in cluster.splitlines()]
    assert removed == ["              nvidia.com/gpu: 1", "              nvidia.com/gpu: 1"]
    assert "    groupName: gpu-group\n    rayStartParams:\n      num-gpus: '1'\n    template:\n" in cluster
    # the untouched groups and the existing tolerations (indented sequence) are byte for byte where they were
    assert RAY_ONE_GPU_GROUP.split("  - replicas: 1\n    groupName: gpu-group")[0] in cluster
    assert "          - key: ray.io/node-type\n            operator: Equal\n" in cluster
    assert "          - key: nvidia.com/gpu\n            operator: Exists\n            effect: NoSchedule\n" in cluster
