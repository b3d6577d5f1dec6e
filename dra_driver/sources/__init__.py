"""What the offline tools read: claims, classes and pods from files (claims), and a fleet's
ResourceSlices from files, a simulated profile or a cluster (fleet)."""
