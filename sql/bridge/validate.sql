-- Upgrade bridge, after its transaction: the check constraints the delivery step added NOT VALID are
-- validated here, in a transaction of their own (SHARE UPDATE EXCLUSIVE: jobs stay readable and
-- writable while its rows are checked). Validating a constraint that is already valid does nothing.
alter table {{ s }}.jobs validate constraint jobs_handler_max_attempts_check;
alter table {{ s }}.jobs validate constraint jobs_round_start_check;
