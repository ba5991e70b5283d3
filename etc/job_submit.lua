-- Mosaic's safety net (JobSubmitPlugins=lua; put this file next to slurm.conf).
--
-- Jobs in the partition Mosaic manages start only when the controller releases them.
-- `mosaic submit` already submits held; this holds (priority 0) any job sent to the
-- managed partition some other way, so plain `sbatch` cannot jump the controller's queue.
-- The controller then plans it like any other job (as a black box without directives).

local MANAGED = { gpu = true }     -- keep in sync with [controller] partitions in mosaic.toml
local DEFAULT_PARTITION = "gpu"    -- the partition a job without -p lands in

function slurm_job_submit(job_desc, part_list, submit_uid)
    local partition = job_desc.partition or DEFAULT_PARTITION
    for name in string.gmatch(partition, "[^,]+") do
        if MANAGED[name] then
            job_desc.priority = 0
            slurm.log_info("mosaic: holding job %s for the controller", tostring(job_desc.name))
            return slurm.SUCCESS
        end
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
