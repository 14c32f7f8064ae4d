namespace SpindleLib.Tests;

public class BuildCheck
{
    [Fact]
    public void DefaultSpindleTask_IsCompleted() => Assert.True(default(SpindleTask).IsCompleted);
}
