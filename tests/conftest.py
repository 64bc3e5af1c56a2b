"""Make the collection importable as ansible_collections.gpuserve.llm from a checkout."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # shared helpers: sysfs_tree, gguf_forward
