// The README's first example, exactly as the README shows it: ReadmeTests checks that the README still shows this code
// and runs it.
#pragma warning disable CA1050 // the example declares its class in no namespace, as a reader's first file would
using System;
using SpindleLib;

public static class Example
{
    private static int s_count;
    private static readonly Action s_increment = () => s_count++;

    // 1000 hand-offs to a worker thread, each awaited: nothing allocated after warm-up.
    public static async SpindleTask CountAsync()
    {
        for (int i = 0; i < 1000; i++)
        {
            await Spindle.Run(s_increment);
        }
    }

    public static async SpindleTask<int> AddOneAsync(SpindleTask<int> task) => await task + 1;

    public static async SpindleTask<int> DemoAsync()
    {
        await CountAsync();
        var promise = new Promise<int>();
        SpindleTask<int> pending = AddOneAsync(promise.Task);
        promise.SetResult(41);
        int answer = await pending;   // 42. Awaiting `pending` again would throw: use Preserve() to await twice.
        promise.Reset();              // a new use of the same promise, with nothing allocated
        return answer + s_count;      // 1042
    }
}
