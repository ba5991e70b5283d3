# sacct_trace.txt (sacct_trace_iso.txt: without SLURM_TIME_FORMAT=%s); Slurm slurm-wlm 22.05.8
SLURM_TIME_FORMAT=%s sacct --parsable2 --noheader --allusers --duplicates --allocations '--delimiter=|' --starttime=now-1hour --format=JobID,User,Account,Partition,QOS,State,Submit,Start,End,ElapsedRaw,Timelimit,AllocTRES,Comment,JobIDRaw
