"""The school's domain: cycles, their stages, triggers, policy, report card and the School facade."""
