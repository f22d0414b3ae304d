-- Upgrade bridge, the history: the pre-squash rows (0001_core..0005_delivery) give way to
-- 0001_baseline's row, recorded next (sql/record_migration.sql) with this jobkit's checksum.
delete from {{ s }}.schema_migrations
where (version, name) in (('0001', 'core'), ('0002', 'wake'), ('0003', 'worker'), ('0004', 'hot_path'),
                          ('0005', 'delivery'));
