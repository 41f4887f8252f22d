//! Jobs (docs/compatibility.md#jobs): a command run without waiting, looked at, awaited (bounded;
//! giving up an await never cancels the job) and cancelled (CANCELLING → CANCELLED: ^C, then a kill
//! of the foreground group if it ignores it). A job is one command of the terminal's shell; its id
//! is `job-<n>`.

use std::time::Duration;

use crate::error::TerminalError;
use ptyhub_protocol::api::{CommandStatus, JobResponse, JobState};

use super::{ExecRequest, JobView, OutputExtent, TerminalHandle};
use crate::exec::truncate_output;

pub fn job_id(command_id: u64) -> String {
    format!("job-{command_id}")
}

fn parse_job_id(job: &str) -> Result<u64, TerminalError> {
    job.strip_prefix("job-")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| TerminalError::JobNotFound {
            job: format!("{job:?}"),
        })
}

/// Starts a job typed by `source` (refused with `INPUT_LEASED` while someone else holds the
/// keyboard); answers at once.
pub async fn start(
    handle: &TerminalHandle,
    command: String,
    hard_timeout: Option<Duration>,
    source: ptyhub_protocol::event::InputSource,
) -> Result<JobResponse, TerminalError> {
    let writer = super::live::Writer::caller(source.clone());
    handle
        .wait_for_keyboard(
            &writer,
            ptyhub_protocol::api::OnLease::Refuse,
            Duration::ZERO,
        )
        .await
        .inspect_err(|error| crate::stats::input_refused(error, command.len()))?;
    let id = handle
        .exec(ExecRequest {
            command,
            hard_timeout,
            source: Some(source),
            ..ExecRequest::default()
        })
        .await?;
    get(handle, &job_id(id)).await
}

pub async fn get(handle: &TerminalHandle, job: &str) -> Result<JobResponse, TerminalError> {
    let id = parse_job_id(job)?;
    let view = handle
        .job(id)
        .await?
        .ok_or_else(|| TerminalError::JobNotFound {
            job: job.to_string(),
        })?;
    Ok(response(id, view))
}

/// Waits up to `limit` for the job to end, then reports it (still `RUNNING` if it did not).
pub async fn wait(
    handle: &TerminalHandle,
    job: &str,
    limit: Duration,
) -> Result<JobResponse, TerminalError> {
    let id = parse_job_id(job)?;
    get(handle, job).await?;
    // The job's answer is read afterwards; its output and the console are not needed here.
    handle
        .wait_command_as(Some(id), Some(limit), OutputExtent::Ends, false)
        .await?;
    get(handle, job).await
}

pub async fn cancel(handle: &TerminalHandle, job: &str) -> Result<JobResponse, TerminalError> {
    let id = parse_job_id(job)?;
    let current = get(handle, job).await?;
    if current.state != JobState::Running {
        return Ok(current);
    }
    handle.cancel(Some(id)).await?;
    get(handle, job).await
}

fn response(id: u64, view: JobView) -> JobResponse {
    let result = view.result;
    let state = match (result.status, view.is_cancel_requested) {
        (CommandStatus::Running, true) => JobState::Cancelling,
        (CommandStatus::Running, false) => JobState::Running,
        (_, true) => JobState::Cancelled,
        (CommandStatus::Completed, false) if result.exit_code == Some(0) => JobState::Succeeded,
        (CommandStatus::Completed, false) => JobState::Failed,
        (CommandStatus::HardTimeout | CommandStatus::NoChangeTimeout, false) => JobState::TimedOut,
        (CommandStatus::Terminated, false) => JobState::Terminated,
    };
    JobResponse {
        job_id: job_id(id),
        session_id: result.session_id,
        command: result.command.unwrap_or_default(),
        state,
        exit_code: result.exit_code,
        output: truncate_output(&view.output_so_far),
    }
}
