"""What a swap carries on a real HDFS (the session's minicluster): a partition directory's permission, access and
default ACL entries, owner and group onto the new directory and every new file, through a compaction and back
through a rollback; and an ordinary user, who may not change an owner, refused before writing anything, then (with
`accept_owner_change`) carrying the rest and saying what it did not; a group it is not in likewise."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster_tests.hdfs import cli_config, data_files, dfs, hidden_dirs, jpath
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, make_table, rows_of, run_cli

pytestmark = pytest.mark.hdfs

DIRECTORY_ACL = "user:etl:rwx,group:analysts:r-x,default:user:etl:rwx,default:group:analysts:r-x"
FILE_ACL = "user:reader:r--,group:analysts:r--"


def give(spark, location: str, mode: str, owner: str, group: str, acl: str) -> None:
    """Set a path's permission, add ACL entries (`AclEntry.parseAclSpec`), then set its owner and group."""
    permission = spark.sparkContext._jvm.org.apache.hadoop.fs.permission
    fs, path = dfs(spark, location), jpath(spark, location)
    fs.setPermission(path, permission.FsPermission(mode))
    fs.modifyAclEntries(path, permission.AclEntry.parseAclSpec(acl, True))
    fs.setOwner(path, owner, group)


def attributes(spark, location: str) -> tuple:
    """(octal permission, owner, group, ACL entries beyond the permission bits) of a path, as the NameNode has it."""
    fs, path = dfs(spark, location), jpath(spark, location)
    status = fs.getFileStatus(path)
    acl = sorted(str(entry) for entry in fs.getAclStatus(path).getEntries())
    return str(status.getPermission().toOctal()), str(status.getOwner()), str(status.getGroup()), acl


def files_attributes(spark, directory: str) -> list[tuple]:
    return [attributes(spark, f"{directory}/{name}") for name in data_files(spark, directory)]


def test_acls_owner_and_group_go_to_the_new_files_and_come_back_with_a_rollback(spark, database, hdfs_dir):
    table = make_table(spark, database, "ev", hdfs_dir, partitions=DATES[:1], files=3)
    part = f"{hdfs_dir}/date=2024-01-01"
    give(spark, part, "750", "hive", "hadoop", DIRECTORY_ACL)
    originals = data_files(spark, part)
    for name in originals:
        give(spark, f"{part}/{name}", "640", "hive", "hadoop", FILE_ACL)
    directory, model = attributes(spark, part), attributes(spark, f"{part}/{originals[0]}")
    assert directory == (
        "770",  # the group bits of a path with an ACL are its mask
        "hive",
        "hadoop",
        sorted(
            ["group::r-x", "group:analysts:r-x", "user:etl:rwx", "default:user::rwx", "default:user:etl:rwx"]
            + ["default:group::r-x", "default:group:analysts:r-x", "default:mask::rwx", "default:other::---"]
        ),
    )
    assert model == ("640", "hive", "hadoop", ["group::r--", "group:analysts:r--", "user:reader:r--"])
    before = rows_of(spark, table)

    [result] = compact_table(spark, database, "ev", OPTIONS)

    assert (result.status, result.files_before, result.files_after, result.not_carried) == ("compacted", 3, 1, [])
    assert rows_of(spark, table) == before
    assert data_files(spark, part) != originals
    assert attributes(spark, part) == directory
    assert files_attributes(spark, part) == [model]  # written outside the partition: given the ACL, not inheriting

    rollback_table(spark, database, "ev")

    assert rows_of(spark, table) == before
    assert data_files(spark, part) == originals
    assert attributes(spark, part) == directory
    assert files_attributes(spark, part) == [model] * 3
    assert hidden_dirs(spark, hdfs_dir) == []


def test_an_ordinary_user_is_refused_a_change_of_owner_or_group_then_carries_the_rest_when_it_is_accepted(
    spark, database, hdfs_dir, hdfs, metastore, tmp_path
):
    root = f"{hdfs_dir}/ev"
    table = make_table(spark, database, "ev", root, partitions=DATES, files=3)
    hives, etls = f"{root}/date=2024-01-01", f"{root}/date=2024-01-02"
    # etl may write the table's directories through ACLs (the journal's too: beside the table), read hive's files
    give(spark, hdfs_dir, "755", "root", "supergroup", "user:etl:rwx")
    give(spark, root, "755", "hive", "warehouse", "user:etl:rwx")  # new directories are made in group warehouse
    give(spark, hives, "750", "hive", "hadoop", "user:etl:rwx")  # etl is in hadoop (GROUPS), not in warehouse
    give(spark, etls, "750", "etl", "analysts", "group:analysts:r-x")  # etl's own, in a group it is not in
    originals = {part: data_files(spark, part) for part in (hives, etls)}
    owners = {hives: ("hive", "hadoop", "user:etl:r--"), etls: ("etl", "analysts", "user:bi:r--")}
    for part, (owner, group, acl) in owners.items():
        for name in originals[part]:
            give(spark, f"{part}/{name}", "640", owner, group, acl)
    found = {part: (attributes(spark, part), files_attributes(spark, part)) for part in (hives, etls)}
    assert found[hives][0] == ("770", "hive", "hadoop", ["group::r-x", "user:etl:rwx"])
    assert found[etls][1] == [("640", "etl", "analysts", ["group::r--", "user:bi:r--"])] * 3
    before = rows_of(spark, table)

    def compact_as_etl(config: dict):
        done = run_cli(
            ["compact", "--table", table],
            tmp_path,
            metastore.uri,
            env_extra={"HADOOP_USER_NAME": "etl"},
            config={**cli_config(hdfs), **config},
        )
        return done, done.stdout + done.stderr

    refused, output = compact_as_etl({})

    assert refused.returncode == 1, output[-3000:]
    for part, kept, who in (
        (hives, "owner hive (group hadoop)", "hive, an HDFS superuser or a proxy user for hive"),
        (etls, "group analysts", "a member of it"),
    ):
        assert (
            f"{table} partition {part.rsplit('/', 1)[1]}: user etl may not give new files the {kept} of {part} and its "
            f"files; compacting would change who owns the data (and may read it). Nothing was changed; run it as {who}"
            ", or set accept_owner_change: true" in output
        ), output[-3000:]
    assert rows_of(spark, table) == before
    assert {part: data_files(spark, part) for part in (hives, etls)} == originals
    assert {part: (attributes(spark, part), files_attributes(spark, part)) for part in (hives, etls)} == found
    assert hidden_dirs(spark, root) == [] and hidden_dirs(spark, hdfs_dir) == []
    assert spark.sql(f"SHOW TABLES IN {database} LIKE '__bkp*'").count() == 0

    done, output = compact_as_etl({"accept_owner_change": True})

    assert done.returncode == 0, output[-3000:]
    lines = sorted(line for line in done.stdout.splitlines() if ": COMPACTED files 3 -> 1" in line)
    assert [line.split(", backup ")[1].split(", ", 1)[1] for line in lines] == [
        f"{kept} not carried (this process may not set them)" for kept in ("owner hive", "group analysts")
    ]
    warned = sorted(line for line in done.stderr.splitlines() if "(this process may not change them)" in line)
    assert [line.split("protocol.swap: ", 1)[1] for line in warned] == [
        f"{hives}: kept the new files' owner hive (this process may not change them)",
        f"{etls}: kept the new files' group analysts (this process may not change them)",
    ], warned
    assert rows_of(spark, table) == before
    assert attributes(spark, hives) == ("770", "etl", "hadoop", ["group::r-x", "user:etl:rwx"])
    assert files_attributes(spark, hives) == [("640", "etl", "hadoop", ["group::r--", "user:etl:r--"])]
    assert attributes(spark, etls)[1:3] == ("etl", "warehouse")  # hive's group for the new directories: not analysts
    assert files_attributes(spark, etls) == [("640", "etl", "warehouse", ["group::r--", "user:bi:r--"])]

    # The superuser's rollback brings back the originals as hive left them, never with the compaction's owner.
    rollback_table(spark, database, "ev", partition=hives.rsplit("/", 1)[1])
    assert (attributes(spark, hives), files_attributes(spark, hives)) == found[hives]
    assert data_files(spark, hives) == originals[hives]


def test_an_owner_changed_after_the_check_before_writing_undoes_the_swap(
    spark, database, hdfs_dir, hdfs, metastore, tmp_path
):
    """The check before writing found etl's own partition; one of its files is given to hive before the swap: the
    new files could not get that owner, so the swap is undone (the setting was not given) and the files stay as
    hive and etl left them."""
    root = f"{hdfs_dir}/ev"
    table = make_table(spark, database, "ev", root, partitions=DATES[:1], files=3)
    part = f"{root}/date={DATES[0]['date']}"
    give(spark, hdfs_dir, "755", "root", "supergroup", "user:etl:rwx")
    for directory in (root, part):
        give(spark, directory, "750", "etl", "hadoop", "user:etl:rwx")
    names = data_files(spark, part)
    for name in names:
        give(spark, f"{part}/{name}", "640", "etl", "hadoop", "user:bi:r--")
    before = rows_of(spark, table)
    release = tmp_path / "release"
    env = {"HADOOP_USER_NAME": "etl", "LAKEKEEPER_FAULT": f"pause@swapping:{release}"}
    running = run_cli(["compact", "--table", table], tmp_path, metastore.uri, env, wait=False, config=cli_config(hdfs))
    try:
        for line in running.stderr:
            if "pausing at swapping" in line:  # checked, written, verified, backed up: the swap comes next
                dfs(spark, part).setOwner(jpath(spark, f"{part}/{names[0]}"), "hive", "hadoop")
                break
    finally:
        release.touch()
        out, err = running.communicate(timeout=300)

    assert running.returncode == 1, err[-3000:]
    assert (
        "its new files could not be given the originals' owner hive (this process may not set them; set "
        "accept_owner_change: true to compact anyway); the swap was undone" in out
    ), out + err[-3000:]
    assert data_files(spark, part) == names
    assert [a[1:3] for a in files_attributes(spark, part)] == [("hive", "hadoop"), ("etl", "hadoop"), ("etl", "hadoop")]
    assert rows_of(spark, table) == before
    assert hidden_dirs(spark, root) == []
