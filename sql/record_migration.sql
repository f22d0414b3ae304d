insert into {{ s }}.schema_migrations (version, name, checksum)
values ({{ version | literal }}, {{ name | literal }}, {{ checksum | literal }});
