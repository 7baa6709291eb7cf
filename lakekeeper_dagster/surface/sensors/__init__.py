"""The sensors: the file-count sensor that starts compactions (`file_count`), the partitions sensor (`partitions`)."""
