using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests;

/// <summary>The suite's own helpers keep their promises (a helper that fails now and then is a flaky test elsewhere).</summary>
public class TestUtilTests
{
    /// <summary>
    /// The code after <c>await TestUtil.LeaveSpindleWorkers()</c> runs off the workers, however late the await looks. It
    /// used to await Task.Yield until the resuming thread was not a worker and return: a thread-pool thread that finished
    /// that task before the caller's await looked at it let the caller go on synchronously, on the worker it meant to
    /// leave (seen in JobCompleteConcurrencyTests: a HoldWorkers created right after it was on "Spindle worker 1"; a loop
    /// of 30,000 leaves hit it up to six times). Here the await looks 100 ms late, every round: the old helper's task was
    /// done by then and the caller stayed on its worker each time (a slow thread pool can only make it pass).
    /// </summary>
    [Fact]
    public async Task LeaveSpindleWorkers_TheCallerGoesOnOffTheWorkers_EvenWhenItsAwaitLooksLate()
    {
        const int rounds = 5;
        int onWorker = 0;
        for (int i = 0; i < rounds; i++)
        {
            await Spindle.SwitchToWorker();
            Assert.True(TestUtil.OnSpindleWorker);
            var leaving = TestUtil.LeaveSpindleWorkers();
            Thread.Sleep(100); // the await below looks late: whatever the helper started elsewhere has finished
            await leaving;
            if (TestUtil.OnSpindleWorker || WorkerPool.Shared.IsWorkerThread)
            {
                onWorker++;
            }
        }
        Assert.True(onWorker == 0, $"{onWorker} of {rounds} callers went on on a Spindle worker after leaving them");
    }
}
